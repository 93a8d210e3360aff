"""``python -m docs.tour``: see ``docs/tour/render.py``."""

from docs.tour.render import main

raise SystemExit(main())
