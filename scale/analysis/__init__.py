"""The measurements of ``python -m scale.analyze`` as a library: ``analyze_model`` (curvature, orbits with controls,
verdict, probes, the training check) and ``analyze_orbits`` (orbits on images of your own), with their settings.

    settings    AnalysisSettings, AnalyzeError
    measure     curvature, analyze_orbits, analyze_model, measure_probes
"""

from scale.analysis.measure import (
    CURVATURE_PHASES,
    analyze_model,
    analyze_orbits,
    curvature,
    measure_probes,
    orbit_result,
    plan_curvature,
)
from scale.analysis.settings import AnalysisSettings, AnalyzeError

__all__ = ["CURVATURE_PHASES", "AnalysisSettings", "AnalyzeError", "analyze_model", "analyze_orbits", "curvature",
           "measure_probes", "orbit_result", "plan_curvature"]
