"""The simulator: scenario files replayed through the engine in virtual time (see DESIGN.md §2).

Pure Python like ``scheduler.core``: no Django, Celery, Redis or kubernetes.
"""

from scheduler.sim.planners import PLANNERS, Planner, UnknownPlanner, planner_named
from scheduler.sim.replay import PlanViolation, replay
from scheduler.sim.report import ReplayResult
from scheduler.sim.scenario import Scenario, load_scenario, parse_scenario
from scheduler.sim.timeline import render_timeline
from scheduler.specs.fields import ScenarioError

__all__ = [
    "PLANNERS",
    "PlanViolation",
    "Planner",
    "ReplayResult",
    "Scenario",
    "ScenarioError",
    "UnknownPlanner",
    "load_scenario",
    "parse_scenario",
    "planner_named",
    "render_timeline",
    "replay",
]
