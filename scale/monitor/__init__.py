"""Head geometry in the loop you already train with (``docs/monitor.md``).

    scale.monitor.core       ``Monitor``: the measurements of any SSL model on a fixed probe, framework-free, with
                             ``Monitor.attach(optimizer)`` as the plain-PyTorch hook
    scale.monitor.lightning  ``GeometryCallback``: a PyTorch Lightning ``Callback`` (the ``lightning`` extra;
                             imported only by whoever imports it)
    scale.monitor.online     ``OnlineKnn``: per-epoch kNN accuracy and loss against chance in ``python -m scale.run``
"""

from scale.monitor.core import Monitor, MonitorInputError

__all__ = ["Monitor", "MonitorInputError"]
