"""Every figure and table of a preset, regenerated from the committed records without a
notebook: what `make figures` runs. It makes the same library calls as the analysis
notebooks 03–07 (which stay the place to explore), in seconds, and the same records give
the same bytes (whalekit.report.plot_style.save_figure writes no dates).

Why: a committed figure must be regenerable from the repository alone (`results/`), and
say which code and CPU made its runs (`provenance.md` beside the figures).

    python -m whalekit.report.figures --preset cpu              # results/cpu (else runs/cpu) -> figures/
    python -m whalekit.report.figures --preset smoke --out /tmp/figures
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from whalekit.infra.runs import NoRunsError
from whalekit.presets import load_preset
from whalekit.records.results import RESULTS_ROOT, check_same_code, choose_root, figures_dir
from whalekit.report import behaviour_plots, lever_plots, plot_style, plots, run_summaries, tables
from whalekit.search.archive import archive_holding

FIGURES_ROOT = Path("figures")


def main_comparison(root: Path, preset: str, out: Path) -> list[Path]:
    """Notebook 03: Table 2 (final, by sub-dataset, three points, paired) and Figures 1b and 2."""
    runs = run_summaries.main_runs(root, preset)
    if not runs:
        return []
    floors = tables.floor_scores(runs)  # chess: the random-legal-move floor per seed
    outputs = {"table2_main": tables.main_comparison(root, preset, floors=floors),
               "table2_by_subset": tables.main_comparison(root, preset, by_subset=True),
               "table2_points": tables.points_table(root, preset, floors=floors)}
    if any(r.method == "whale" for r in runs):
        outputs["table2_paired"] = tables.paired_comparison(root, preset)
    written = [path for name, table in outputs.items() for path in tables.save_table(table, out / name)]
    figures = {"fig1b_final_accuracy": plots.accuracy_bars_figure(runs, "final", floors),
               "fig1b_best_accuracy": plots.best_accuracy_figure(runs, floors),  # selected on test
               "fig2_test_accuracy": plots.accuracy_curve_figure(runs, floors=floors),
               "fig2_best_so_far": plots.best_so_far_figure(runs, floors)}  # selected on test
    return written + _save(figures, out)


def bottleneck(root: Path, preset: str, out: Path) -> list[Path]:
    """Notebook 04: Figure 3 (which lever moved the score), and the behaviour dashboard
    per domain as its supplement."""
    runs = run_summaries.main_runs(root, preset)
    if not runs:
        return []
    return _save({"fig3_levers": lever_plots.lever_figure(runs),
                  **{f"fig3_bottleneck_{domain}": behaviour_plots.bottleneck_figure([r for r in runs
                                                                                    if r.domain == domain])
                     for domain in dict.fromkeys(r.domain for r in runs)}}, out)


def schedule_grid(root: Path, preset: str, out: Path) -> list[Path]:
    """Notebook 05: Table 3 and Figure 4, when the preset has a grid and its runs exist."""
    if not load_preset(preset).get("grid"):
        return []
    runs = run_summaries.grid_runs(root, preset)
    if not runs:
        return []
    floors = tables.floor_scores(runs)
    table = tables.schedule_grid(root, preset, floors=floors)
    return tables.save_table(table, out / "table3_schedule_grid") + \
        _save({"fig4_schedule_grid": plots.schedule_grid_figure(runs, floors)}, out)


def adaptive(root: Path, preset: str, out: Path) -> list[Path]:
    """Notebook 06: Figure 6, when adaptive runs exist."""
    runs = run_summaries.find_runs(root, preset, method="adaptive")
    return _save({"fig6_adaptive": plots.adaptive_figure(runs)}, out) if runs else []


def harness_archive(root: Path, preset: str, out: Path) -> list[Path]:
    """Notebook 07: per WHALE run, the lineage of the accepted harness and its diff against
    the seed of the archive that proposed it, one file per (domain, seed)."""
    written: list[Path] = []
    for run in [r for r in run_summaries.main_runs(root, preset) if r.method == "whale"]:
        accepted = (run.end or {}).get("accepted_id")
        archive = archive_holding(run.path / "archive", run.domain, accepted, proposed=True) or archive_holding(
            run.path / "archive", run.domain, accepted)
        if archive is None or accepted is None:
            continue
        figure = plots.lineage_figure(archive, accepted, title=f"{run.domain}, seed {run.seed}: harness lineage "
                                                               f"({len(archive)} candidates)")
        written += _save({f"fig_lineage_{run.domain}_s{run.seed}": figure}, out)
        diff = archive.diff(accepted, archive.seed_id()) or f"# {run.domain}: the accepted harness is the seed itself\n"
        path = out / f"harness_diff_{run.domain}_s{run.seed}.diff"
        path.write_text(diff, encoding="utf-8")
        written.append(path)
    return list(dict.fromkeys(written))


def provenance_note(root: Path, preset: str, out: Path) -> Path:
    """`provenance.md`: which records the figures come from, the code that made them
    (version, source hash, commit, tag) and the CPU kinds and samplers they ran on."""
    runs = run_summaries.find_runs(root, preset)
    shared = check_same_code(runs)
    kinds = Counter(str((r.config.get("provenance") or {}).get("cpu_kind", "not recorded")) for r in runs)
    samplers = Counter(str((r.config.get("provenance") or {}).get("sampler", "not recorded")) for r in runs)
    code = ", ".join(f"{key} `{shared[key]}`" for key in ("whalekit_version", "git_tag", "git_commit", "source_sha256")
                     if shared.get(key)) or "not recorded"
    lines = [f"# Where the {Path(preset).stem} figures come from", "",
             f"Regenerated by `python -m whalekit.report.figures --preset {Path(preset).stem}` (`make figures`) from "
             f"{len(runs)} finished runs under `{root / Path(preset).stem}`.", "",
             f"- code: {code}",
             "- CPU kinds: " + "; ".join(f"{kind} ({n} runs)" for kind, n in sorted(kinds.items())),
             "- samplers: " + "; ".join(f"{name} ({n} runs)" for name, n in sorted(samplers.items())), "",
             "| domain | run |", "| --- | --- |", *[f"| {r.domain} | {r.name} |" for r in runs]]
    path = out / "provenance.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _save(figures: dict[str, plot_style.Figure], out: Path) -> list[Path]:
    written = []
    for stem, figure in figures.items():
        written += plot_style.save_figure(figure, out / stem)
        plot_style.plt.close(figure)
    return written


PARTS: tuple[Callable[[Path, str, Path], list[Path]], ...] = (main_comparison, bottleneck, schedule_grid, adaptive,
                                                              harness_archive)


def write_figures(root: str | Path, preset: str, out: str | Path) -> list[Path]:
    """Every figure and table of `preset` from the runs under `root` (records or run
    directories) into `out`; the paths written. Runs made by different code raise
    whalekit.records.results.MixedRecordsError before anything is drawn."""
    root, out = Path(root), Path(out)
    if not run_summaries.find_runs(root, preset):  # also the one-code-version check
        raise NoRunsError(f"no finished runs under {root / Path(preset).stem}", preset)
    out.mkdir(parents=True, exist_ok=True)
    return [path for part in PARTS for path in part(root, preset, out)] + [provenance_note(root, preset, out)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python -m whalekit.report.figures")
    parser.add_argument("--preset", default="cpu", help="preset name or file (default: cpu)")
    parser.add_argument("--results", default=str(RESULTS_ROOT), help="committed records (default: results)")
    parser.add_argument("--runs", default="runs", help="run directories, read when --results has no record "
                                                       "of the preset (default: runs)")
    parser.add_argument("--out", default=None, help="where figures and tables go (default: figures/, "
                                                    "figures/<preset> for presets other than cpu)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    root = choose_root(args.results, args.runs, args.preset)
    out = Path(args.out) if args.out else figures_dir(args.preset, FIGURES_ROOT)
    written = write_figures(root, args.preset, out)
    print(f"wrote {len(written)} files to {out} from {root / Path(args.preset).stem} in "
          f"{time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
