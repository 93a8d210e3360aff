"""The replication ledger's rules are the registered ones: every band, bar and premise rule that decides a verdict
(``scale.ledger.claims``) equals what ``docs/replication/registrations`` holds, as registered before the first unit
ran or as its last logged amendment (``scale.replicate --amend``).

A verdict is only as blind as its rule: a band widened after the data are seen (the paper's "about 70 %" read as
[0.3, 0.95] instead of the registered [0.5, 0.9]) turns a "not reproduced" into a "reproduced" without any change
in the units. This check reads the registered rules claim by claim, so such an edit fails here with the claim's
name, and the rules' SHA-256 against the registration, so no part of a verdict's setting (the interval's level,
the multiplicity family, the seeds cap) moves either.

Both sides of that comparison live in the same tree, so a consistent rewrite of the rules and of the
registration (the band widened in ``scale.ledger.claims`` and the registration's rules and hash rewritten to
match) passes it. The registration is therefore also anchored in the repository's history
(``test_registration_is_the_one_committed_before_its_units``), for every registration file under
``docs/replication`` at any depth (``**/registrations/<plan>.json``, so a ``git mv`` of a ledger keeps it):

- its content was committed in exactly one version: every commit that touched a file of that name (under any
  ``registrations`` folder: a move changes the path, not the name or the blob) holds the same blob, and the
  working tree's registration is that version, parsed (so its recorded rules hash is the committed one);
- the committed version is consistent: its rules hash to its recorded ``rules_hash``;
- its rules were committed before its plan's first unit: the first commit that added a registration recording
  its rules hash (its own, or an earlier plan's with the same rules) is an ancestor of, and not, the first
  commit that added a unit file of the plan (``**/units/<plan>--*.json``). (Today the v2 registration
  ``cd203a3ff847`` was committed a commit before its units; the two determinism reruns, ``62fa52311037`` and
  ``d5e0528547b1``, were committed together with their units, but record the same rules hash, committed with
  ``cd203a3ff847`` before any of their units: git cannot order files of one commit, so it is the rules' first
  commit that anchors them. The test prints which.)

It skips, with its reason, outside a git checkout, in a shallow clone (history cut short), and for a
registration not committed yet.

Negative controls: a rule moved in a copy of the registered data is reported by the same comparison; and, in a
temporary git repository, a registration rewritten consistently and committed again, one rewritten in the
working tree only, one committed after its first unit, and a plan with a widened band registered in the same commit
as its units after another plan's registration (other rules: no anchor for its own) are each reported.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LEDGER = ROOT / "docs" / "replication"
NO_BLOB = "0" * 40


def _in_force(folder: Path = LEDGER) -> list[tuple[str, dict[str, Any], str]]:
    """Each registration's plan, the rules in force (the last amendment's, else the registered ones) and its hash."""
    from scale.ledger import store

    found = []
    for path in sorted((folder / "registrations").glob("*.json")):
        reg = json.loads(path.read_text())
        logged = store.amendments(folder, reg["plan"])
        rules, digest = (logged[-1]["rules"], logged[-1]["to_hash"]) if logged else (reg["rules"], reg["rules_hash"])
        found.append((reg["plan"], rules, digest))
    return found


def _moved(registered: dict[str, Any], today: dict[str, Any]) -> list[str]:
    """The claims whose deciding rule differs: the claim's rule, its premises' and alternatives' rules, its interval's
    kind, its magnitude (the paper's value, the band, the runs behind it), its twin's rule, the trainings that must
    have learned and the protocol of its statistic."""
    def deciding(c: dict[str, Any]) -> Any:
        magnitude = c.get("magnitude") or {}
        return (c["rule"], [p["rule"] for p in c["premises"]], [a["rule"] for a in c["alternatives"]], c["kind"],
                (magnitude.get("paper"), magnitude.get("band"), magnitude.get("runs", 0)),
                c.get("twin"), c.get("learned"), c.get("protocol", ""))

    before = {c["id"]: deciding(c) for c in registered["claims"]}
    after = {c["id"]: deciding(c) for c in today["claims"]}
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def test_every_rule_is_the_registered_one():
    from scale.ledger import claims
    from scale.ledger.plan import digest

    today = claims.rules_data()
    registrations = _in_force()
    assert registrations, "no registration in force at the top of docs/replication"
    for plan, rules, registered_hash in registrations:
        assert digest(rules) == registered_hash, f"plan {plan}: the registered rules do not hash to their record"
        moved = _moved(rules, today)
        assert not moved, f"plan {plan}: rules changed since registration without an amendment: {moved}"
        assert rules["statistics"] == today["statistics"], f"plan {plan}: the statistics' settings changed"
        assert claims.rules_hash() == registered_hash, f"plan {plan}: the rules' hash is not the registered one"


def test_negative_control_a_widened_band_is_reported():
    """The comparison itself can fail: E2.2's registered band widened in a copy is named."""
    from scale.ledger import claims

    today = claims.rules_data()
    widened = copy.deepcopy(today)
    row = next(c for c in widened["claims"] if c["rule"]["direction"] == "within")
    row["rule"]["band"] = [0.3, 0.95]
    assert _moved(widened, today) == [row["id"]]


# ------------------------------------------------------------------------------------------------
# The registration as committed: anchored in the repository's history
# ------------------------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def history_usable(repo: Path) -> str | None:
    """Why ``repo``'s history cannot anchor a registration (``None`` when it can)."""
    if shutil.which("git") is None:
        return "git is not installed"
    try:
        if git(repo, "rev-parse", "--is-inside-work-tree").strip() != "true":
            return f"{repo} is not a git checkout"
        if git(repo, "rev-parse", "--is-shallow-repository").strip() == "true":
            return "a shallow clone: the history that anchors the registrations is cut short"
    except subprocess.CalledProcessError:
        return f"{repo} is not a git checkout"
    return None


@dataclass
class Commit:
    sha: str
    added: dict[str, str] = field(default_factory=dict)  # path -> blob, for files added or modified


def commits_touching(repo: Path, pattern: str, only_added: bool = False) -> list[Commit]:
    """The commits (oldest first) that touched a path matching the glob ``pattern``, each with the blobs it wrote
    there (renames are shown as a delete and an add, so a move writes the same blob again)."""
    args = ["log", "--reverse", "--no-renames", "--raw", "--no-abbrev", "--format=commit %H"]
    out = git(repo, *args, *(["--diff-filter=A"] if only_added else []), "--", f":(glob){pattern}")
    commits: list[Commit] = []
    for line in out.splitlines():
        if line.startswith("commit "):
            commits.append(Commit(line.split()[1]))
        elif line.startswith(":"):
            meta, path = line.split("\t", 1)
            new_blob, status = meta.split()[3], meta.split()[4]
            if status != "D" and new_blob != NO_BLOB:
                commits[-1].added[path] = new_blob
    return commits


def blob_json(repo: Path, blob: str) -> dict[str, Any]:
    return json.loads(git(repo, "cat-file", "-p", blob))


def registration_anchor(repo: Path, path: Path) -> tuple[list[str], str]:
    """What is wrong with the registration at ``path`` (relative to ``repo``) against the history, and how its
    order before the units was established; ``pytest.skip`` when it is not committed yet."""
    from scale.ledger.plan import digest

    plan = path.stem
    touched = commits_touching(repo, f"**/registrations/{plan}.json")
    versions = {blob for c in touched for blob in c.added.values()}
    if not versions:
        pytest.skip(f"registration {path} is not committed yet: no history anchors it")
    problems = []
    if len(versions) > 1:
        problems.append(f"plan {plan}: the registration was committed in {len(versions)} versions "
                        f"({', '.join(c.sha[:10] for c in touched)}): rewritten after it was first committed")
    first = touched[0]
    committed = blob_json(repo, next(iter(first.added.values())))
    today = json.loads((repo / path).read_text())
    if today != committed:
        moved = sorted(k for k in committed.keys() | today.keys() if committed.get(k) != today.get(k))
        problems.append(f"plan {plan}: the registration differs from its committed version in {moved}")
    if today.get("rules_hash") != committed.get("rules_hash"):
        problems.append(f"plan {plan}: recorded rules hash {today.get('rules_hash')} is not the committed "
                        f"{committed.get('rules_hash')}")
    if digest(committed["rules"]) != committed["rules_hash"]:
        problems.append(f"plan {plan}: the committed rules do not hash to the committed rules_hash")
    units = commits_touching(repo, f"**/units/{plan}--*.json", only_added=True)
    if not units:
        return problems, "no unit committed yet"
    unit_commit = units[0].sha
    def records_the_rules(c: Commit) -> bool:
        return any(blob_json(repo, b).get("rules_hash") == committed["rules_hash"] for b in c.added.values())

    rules_first = next(c.sha for c in commits_touching(repo, "**/registrations/*.json", True) if records_the_rules(c))
    before = rules_first != unit_commit and subprocess.run(
        ["git", "merge-base", "--is-ancestor", rules_first, unit_commit], cwd=repo).returncode == 0
    if not before:
        problems.append(f"plan {plan}: its rules were first registered in {rules_first[:10]}, which does not precede "
                        f"its first unit's commit {unit_commit[:10]}")
    how = "registered in" if rules_first == first.sha else "its rules registered (by an earlier plan) in"
    return problems, f"{how} {rules_first[:10]}, before the first unit's commit {unit_commit[:10]}"


def registration_order(repo: Path) -> dict[str, int]:
    """Each plan id by the order its registration was first committed (one ``git log``; empty without git)."""
    try:
        out = git(repo, "log", "--reverse", "--diff-filter=A", "--no-renames", "--format=", "--name-only", "--",
                  ":(glob)**/registrations/*.json")
    except (OSError, subprocess.CalledProcessError):
        return {}
    order: dict[str, int] = {}
    for line in filter(None, out.splitlines()):
        order.setdefault(Path(line).stem, len(order))
    return order


# Oldest registration first, named by plan id (a ledger's move, or a new registration, leaves the ids and the
# first ones as they are); registrations not committed yet last.
_ORDER = registration_order(ROOT)
REGISTRATIONS = sorted((p.relative_to(ROOT) for p in LEDGER.glob("**/registrations/*.json")),
                       key=lambda p: (_ORDER.get(p.stem, len(_ORDER)), p.stem))


@pytest.mark.parametrize("path", REGISTRATIONS, ids=lambda p: p.stem)
def test_registration_is_the_one_committed_before_its_units(path: Path) -> None:
    reason = history_usable(ROOT)
    if reason:
        pytest.skip(reason)
    problems, order = registration_anchor(ROOT, path)
    print(f"{path}: {order}")
    assert not problems, "\n".join(problems)


def test_there_are_registrations_to_anchor() -> None:
    assert REGISTRATIONS, "no registration under docs/replication/**/registrations"


class Scratch:
    """A temporary git repository with one registration (rules ``{"band": [0.5, 0.9]}``) and its units."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        self.git("init", "-q")

    def git(self, *args: str) -> str:
        return git(self.root, "-c", "user.name=control", "-c", "user.email=control@example.org", *args)

    def write(self, rel: str, data: dict[str, Any]) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1, sort_keys=True))

    def commit(self, message: str) -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)

    @staticmethod
    def registration(band: list[float]) -> dict[str, Any]:
        from scale.ledger.plan import digest

        rules = {"band": band}
        return {"plan": "p0", "rules": rules, "rules_hash": digest(rules)}

    @staticmethod
    def unit() -> dict[str, Any]:
        return {"plan": "p0"}


REG, UNIT = "ledger/registrations/p0.json", "ledger/units/p0--a.json"


def test_negative_control_rewritten_registrations_and_late_ones_are_reported(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    ok = Scratch(tmp_path / "ok")
    ok.write(REG, Scratch.registration([0.5, 0.9]))
    ok.commit("register")
    ok.write(UNIT, Scratch.unit())
    ok.commit("a unit")
    ok.git("mv", "ledger", "v2")  # a move keeps the anchor
    ok.commit("move the ledger")
    assert registration_anchor(ok.root, Path("v2/registrations/p0.json"))[0] == []

    rewritten = Scratch(tmp_path / "rewritten")  # rules and hash rewritten together, and committed
    rewritten.write(REG, Scratch.registration([0.5, 0.9]))
    rewritten.commit("register")
    rewritten.write(UNIT, Scratch.unit())
    rewritten.commit("a unit")
    rewritten.write(REG, Scratch.registration([0.3, 0.95]))
    rewritten.commit("widen the band")
    problems = registration_anchor(rewritten.root, Path(REG))[0]
    assert any("2 versions" in p for p in problems) and any("rules hash" in p for p in problems), problems

    (ok.root / "v2/registrations/p0.json").write_text(json.dumps(Scratch.registration([0.3, 0.95])))  # tree only
    problems = registration_anchor(ok.root, Path("v2/registrations/p0.json"))[0]
    assert any("differs from its committed version" in p for p in problems), problems

    late = Scratch(tmp_path / "late")  # the unit committed first
    late.write(UNIT, Scratch.unit())
    late.commit("a unit")
    late.write(REG, Scratch.registration([0.5, 0.9]))
    late.commit("register")
    assert any("does not precede" in p for p in registration_anchor(late.root, Path(REG))[0])

    same = Scratch(tmp_path / "same")  # registration and units in one commit, no earlier registration of the rules
    same.write(REG, Scratch.registration([0.5, 0.9]))
    same.write(UNIT, Scratch.unit())
    same.commit("register and run")
    assert any("does not precede" in p for p in registration_anchor(same.root, Path(REG))[0])
    same.write("ledger/registrations/p1.json", {**Scratch.registration([0.5, 0.9]), "plan": "p1"})
    same.write("ledger/units/p1--a.json", {**Scratch.unit(), "plan": "p1"})
    same.commit("a rerun of the same rules")  # anchored by p0's registration, an earlier commit
    assert registration_anchor(same.root, Path("ledger/registrations/p1.json"))[0] == []


def test_negative_control_a_widened_plan_registered_with_its_units_is_reported(tmp_path: Path) -> None:
    """Each plan's own rules hash is what must precede its units: ``p0`` registered first, then ``p1`` with a widened
    band registered in the same commit as its units. An earlier registration of other rules anchors nothing."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = Scratch(tmp_path / "widened")
    repo.write(REG, Scratch.registration([0.5, 0.9]))
    repo.commit("register p0")
    repo.write("ledger/registrations/p1.json", {**Scratch.registration([0.3, 0.95]), "plan": "p1"})
    repo.write("ledger/units/p1--a.json", {**Scratch.unit(), "plan": "p1"})
    repo.commit("register p1 with a widened band, and run it")
    problems = registration_anchor(repo.root, Path("ledger/registrations/p1.json"))[0]
    assert any("does not precede" in p for p in problems), f"p1's widened rules anchored by p0's: {problems}"
