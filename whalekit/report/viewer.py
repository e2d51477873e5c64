"""The interactive trace viewer: runs → harness candidates / test evaluations → examples →
trajectory, with each pick's harness diffed against its parent.

It opens on the most informative view: a WHALE run (one whose search changed the harness
and that solved something, when there is one), the accepted harness, and a correct
trajectory with a tool call when there is one. Every pick sets the pickers that depend on
it explicitly and renders at once, so a view is never stale (ipywidgets 8 fires no
observer when a Dropdown's new options keep its index, or when its index is None).

    viewer = browse("runs", "cpu")      # JupyterLab: the widget; headless: static HTML
    viewer.show_run(viewer.runs[1])     # what picking the second run in its menu does
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from whalekit.infra.runs import NoRunsError, RunDir
from whalekit.records.results import record_examples
from whalekit.report import widgets
from whalekit.report.run_summaries import default_run_name
from whalekit.samplers.model_files import load_tokenizer, resolve_model_dir
from whalekit.search.archive import Archive, archive_folders, archive_holding
from whalekit.types import Trajectory

TEST_PREFIX = "test "  # sources named "test eval-000"; archive evaluations are "<id> @ w<version>"


def find_run_dirs(runs_root: str | Path, preset: str) -> list[Path]:
    """Every run directory under runs_root/<preset>/<domain>/<run>."""
    return sorted(p.parent for p in (Path(runs_root) / Path(preset).stem).glob("*/*/config.json"))


def run_sources(run_root: str | Path) -> dict[str, list[Trajectory]]:
    """Everything a run kept that can be browsed: each test evaluation ('test eval-000')
    and each archive candidate's search-split evaluation ('<id> @ w<version>'); of a
    committed record (whalekit.records.results), the example trajectories of its final evaluation."""
    run = RunDir(run_root)
    sources: dict[str, list[Trajectory]] = {}
    examples = record_examples(run.root)  # a committed record keeps whole trajectories only there
    if examples is not None:
        sources.update({f"{TEST_PREFIX}{name}": trajectories for name, trajectories in examples.items()})
    for path in sorted((run.root / "test").glob("eval-*.jsonl")) if examples is None else []:
        sources[f"{TEST_PREFIX}{path.stem}"] = run.trajectories(path.stem)
    for folder in archive_folders(run.root / "archive"):  # one archive, or one per harness phase
        archive = Archive.open(folder, run.config()["domain"])
        for entry in archive.entries():
            for version in sorted(entry.scores):
                trajectories = archive.trajectories(entry.id, version)
                if trajectories or examples is None:  # a record keeps no archive trajectories
                    sources[f"{entry.id} @ w{version}"] = trajectories
    return sources


def accepted_harness(run_root: str | Path) -> str | None:
    """The harness the run ended with (its last accepted one so far when unfinished)."""
    run = RunDir(run_root)
    for kind in ("run_end", "test_eval"):
        events = run.events(kind)
        if events and events[-1].get("accepted_id"):
            return str(events[-1]["accepted_id"])
    return None


def source_harness(run_root: str | Path, source: str) -> str | None:
    """The harness that produced a source's trajectories."""
    if not source.startswith(TEST_PREFIX):
        return source.split(" @ ")[0]
    index = int(source.split("-")[-1])
    evals = [e for e in RunDir(run_root).events("test_eval") if e["index"] == index]
    return evals[-1].get("accepted_id") if evals else None


def run_rank(run_root: str | Path) -> tuple[bool, bool, bool, bool, bool]:
    """How informative a run is to open on (higher first): a WHALE run, finished, its
    search changed the harness, it solved some test problem, the preset's main schedule."""
    run = RunDir(run_root)
    config = run.config()
    evals = run.events("test_eval")
    changed = bool(evals) and accepted_harness(run_root) not in (None, evals[0].get("accepted_id"))
    try:
        main = run.root.name == default_run_name(run.root.parents[1].name, config["domain"], config["method"],
                                                 config.get("seed", 0))
    except (KeyError, ValueError, TypeError):
        main = False
    return (config.get("method") == "whale", run.done, changed,
            any(e.get("mean_at_k", 0) > 0 for e in evals), main)


def rank_runs(runs: list[Path]) -> list[Path]:
    """Runs, most informative first (stable: ties keep their order)."""
    return sorted(runs, key=run_rank, reverse=True)


def _example_rank(trajectory: Trajectory) -> tuple[bool, bool]:
    return trajectory.correct, any(turn.tool_calls for turn in trajectory.turns)


def default_example(trajectories: list[Trajectory]) -> int | None:
    """The first correct trajectory with a tool call; else the first correct; else the
    first with a tool call; else the first."""
    if not trajectories:
        return None
    best = max(_example_rank(t) for t in trajectories)
    return next(i for i, t in enumerate(trajectories) if _example_rank(t) == best)


def default_source(run_root: str | Path, sources: dict[str, list[Trajectory]]) -> str | None:
    """The source to open on: the accepted harness's evaluations first, then those with a
    correct trajectory, then those with a tool call; the latest among equals."""
    if not sources:
        return None
    accepted = accepted_harness(run_root)

    def rank(item: tuple[int, str]) -> tuple[bool, bool, bool, int]:
        order, name = item
        trajectories = sources[name]
        best = max((_example_rank(t) for t in trajectories), default=(False, False))
        return source_harness(run_root, name) == accepted, best[0], best[1], order

    return max(enumerate(sources), key=rank)[1]


def source_diff_html(run_root: Path, source: str | None) -> str:
    """The diff for a source: a candidate against its parent, a test evaluation's harness
    against the archive's seed (h0, or the phase's incoming harness)."""
    domain = RunDir(run_root).config()["domain"]
    if not source or archive_holding(run_root / "archive", domain) is None:
        return "<div>this run has no harness archive (its harness never changed)</div>"
    candidate = source_harness(run_root, source)
    archive = archive_holding(run_root / "archive", domain, candidate, proposed=True) if candidate else None
    if archive is None or candidate is None:  # never proposed: h0 itself
        return "<div>h0, the domain's initial harness (no parent)</div>"
    return widgets.candidate_diff_html(archive, candidate)


def _load_tokenizer(run_root: Path) -> Any:
    """The run's tokenizer, for token pieces; None when it cannot be loaded here."""
    try:
        return load_tokenizer(resolve_model_dir(RunDir(run_root).config()["model"]))
    except Exception:  # noqa: BLE001 - the text view needs no tokenizer
        return None


class TraceViewer:
    """The widget and the state behind it. `show_run`, `show_source` and `show_example`
    are what the three menus do; each renders its view before it returns, and the HTML
    shown is kept in `summary_html`, `trace_html` and `diff_html`."""

    def __init__(self, runs: list[Path], base: Path, tokens: bool = False):
        import ipywidgets as w

        self.runs, self.base, self.tokens = rank_runs(runs), base, tokens
        self.sources: dict[str, list[Trajectory]] = {}
        self.run: Path = self.runs[0]
        self.source: str | None = None
        self.example: int | None = None
        self._tokenizers: dict[Path, Any] = {}
        self._updating = False
        wide = w.Layout(width="auto", min_width="260px")
        self.run_box = w.Dropdown(options=[(self.run_label(r), r) for r in self.runs], value=self.run,
                                  description="run", layout=wide)
        self.source_box = w.Dropdown(options=[], description="candidate", layout=wide)
        self.example_box = w.Dropdown(options=[], description="example", layout=wide)
        self.summary, self.trace, self.diff = w.HTML(), w.HTML(), w.HTML()
        for box, show in ((self.run_box, self.show_run), (self.source_box, self.show_source),
                          (self.example_box, self.show_example)):
            box.observe(self._picked(show), "value")
        tabs = w.Tab(children=[self.trace, self.diff])
        tabs.set_title(0, "trajectory")
        tabs.set_title(1, "harness diff")
        self.widget = w.VBox([w.HBox([self.run_box, self.source_box, self.example_box],
                                     layout=w.Layout(flex_flow="row wrap")), self.summary, tabs],
                             layout=w.Layout(max_width="1000px"))
        self.show_run(self.run)

    def _picked(self, show: Any) -> Any:
        def observer(change: dict[str, Any]) -> None:
            if not self._updating and change["new"] is not None:
                show(change["new"])
        return observer

    def run_label(self, run: Path) -> str:
        return str(run.relative_to(self.base)) if run.is_relative_to(self.base) else str(run)

    def _set(self, box: Any, options: list[Any], value: Any) -> None:
        """Options and value together, observers silenced: the caller renders."""
        self._updating = True
        try:
            box.options = options
            box.value = value
        finally:
            self._updating = False

    def show_run(self, run: Path) -> None:
        self.run = Path(run)
        self.sources = run_sources(self.run)
        accepted = accepted_harness(self.run)
        labels = []
        for name, trajectories in self.sources.items():
            mark = " ★ accepted" if source_harness(self.run, name) == accepted else ""
            labels.append((f"{name}{mark} · {sum(t.correct for t in trajectories)}/{len(trajectories)} correct", name))
        self._set(self.run_box, self.run_box.options, self.run)
        self._set(self.source_box, labels, default_source(self.run, self.sources))
        self.summary.value = self._summary()
        self.show_source(self.source_box.value)

    def show_source(self, source: str | None) -> None:
        self.source = source
        trajectories = self.sources.get(source, []) if source else []
        options = [(f"{i + 1}: {t.task_id} #{t.sample_index} ({'✓' if t.correct else '✗'})"
                    + (" · tool call" if any(turn.tool_calls for turn in t.turns) else ""), i)
                   for i, t in enumerate(trajectories)]
        self._set(self.example_box, options, default_example(trajectories))
        self.diff.value = source_diff_html(self.run, source)
        self.show_example(self.example_box.value)

    def show_example(self, index: int | None) -> None:
        self.example = index
        trajectories = self.sources.get(self.source, []) if self.source else []
        if index is None or not trajectories:
            self.trace.value = f"<div>{widgets.escape(self.run_label(self.run))}: no trajectories kept here</div>"
            return
        tokenizer = None
        if self.tokens:
            tokenizer = self._tokenizers.setdefault(self.run, _load_tokenizer(self.run))
        title = f"{self.run_label(self.run)} · {self.source} · example {index + 1}"
        self.trace.value = widgets.trajectory_html(trajectories[index], tokenizer=tokenizer, title=title)

    def _summary(self) -> str:
        run = RunDir(self.run)
        config, ends = run.config(), run.events("run_end")
        end = f"final test mean@k {100 * ends[-1]['final_mean_at_k']:.1f} %" if ends else "unfinished"
        esc = widgets.escape
        return (f"<div style='font-size:12px'>{esc(self.run_label(self.run))} · method {esc(config.get('method'))}"
                f" · domain {esc(config.get('domain'))} · accepted harness "
                f"<code>{esc(accepted_harness(self.run))}</code> · {end}</div>")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def browse(runs_root: str | Path, preset: str = "cpu", interactive: bool | None = None,
           static_examples: int = 2, tokens: bool = False) -> TraceViewer | None:
    """The trace viewer. Interactive (ipywidgets): pick a run, a candidate or test
    evaluation, an example; see the trajectory and the harness's diff against its parent.
    Static (no widgets, or `interactive=False`): the most informative run's accepted
    harness diff and `static_examples` trajectories as HTML. `tokens` shows each
    completion as the sampled token pieces (loads the run's tokenizer)."""
    base = Path(runs_root) / Path(preset).stem
    runs = find_run_dirs(runs_root, preset)
    if not runs:
        raise NoRunsError(f"no runs under {base}", preset)
    if interactive is None:
        interactive = widgets.widgets_available()
    if not interactive:
        _static_view(rank_runs(runs)[0], static_examples)
        return None
    return TraceViewer(runs, base, tokens)


def _accepted_diff(run_root: Path) -> str:
    domain = RunDir(run_root).config()["domain"]
    accepted = accepted_harness(run_root)
    archive = archive_holding(run_root / "archive", domain, accepted, proposed=True) if accepted else None
    # Against the seed of the archive that proposed it: h0, or the phase's incoming harness.
    return "" if archive is None or accepted is None else widgets.candidate_diff_html(archive, accepted,
                                                                                     archive.seed_id())


def _static_view(run_root: Path, examples: int) -> None:
    sources = run_sources(run_root)
    parts = [f"<h4>{widgets.escape(run_root)}</h4>",
             _accepted_diff(run_root) or "<div>accepted harness: h0 (unchanged)</div>"]
    source = default_source(run_root, sources)
    if source is not None:
        trajectories = sources[source]
        first = default_example(trajectories) or 0
        order = [first] + [i for i in range(len(trajectories)) if i != first]
        for i in order[:examples]:
            parts.append(widgets.trajectory_html(trajectories[i], title=f"{source} · example {i + 1}"))
    widgets.show_html("".join(parts))
