"""A tour of the paper in six runnable chapters, and the command that renders them.

Each chapter ``NN_name.py`` is a plain Python file in cells (``# %%`` code cells, ``# %% [markdown]``
text cells: the percent format, so ``python NN_name.py`` runs it and jupytext opens it as a notebook).
``python -m docs.tour`` (from the repository root) executes every chapter cell by cell and writes
``NN_name.md`` beside it, with the printed output under each cell and its figures as
``NN_name_figK.png``, and the index ``README.md``. ``docs/tour/render.py`` is the renderer.
"""
