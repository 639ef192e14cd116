"""The table the GPU check prints at the end: one row a run (a training's throughput, MFU and memory; the
recipe's figures; a prediction's windows/s against the Kaggle kernel's projection), the recipe's stages, the
speed part's goals and what was skipped."""

from __future__ import annotations


def report(result: dict) -> None:
    gib = 1 / 2**30
    print(f"\n{result['device_name']} (CUDA {result['cuda_version']}, torch {result['torch']}); peak "
          f"{result['peak_tflops']} TFLOP/s bf16 ({result['peak_tflops_source']})")
    print("| run | engine | samples/s | tokens/s | MFU | peak GPU memory (allocated) | model states | loss first -> last |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in result["runs"].items():
        if not r.get("ok"):
            print(f"| {name} | failed ({r['returncode']}) | | | | | | |")
        elif "samples_per_s" in r:
            mfu = f"{100 * r['mfu']:.1f}%" if r.get("mfu") is not None else "-"
            scale = f", loss scale {r['loss_scale']:g}" if "loss_scale" in r else ""
            states = f"{r['model_state_bytes'] * gib:.2f} GiB" if "model_state_bytes" in r else "-"
            first = f"{r['loss_first']:.3f} -> " if "loss_first" in r else ""
            print(f"| {name} | {r['engine']} | {r['samples_per_s']:.1f} | {r['tokens_per_s']:,.0f} | {mfu} | "
                  f"{r.get('max_memory_allocated_bytes', 0) * gib:.2f} GiB | {states} | "
                  f"{first}{r['loss_last']:.3f}{scale} |")
        elif "rows" in r.get("figures", {}):
            print(f"| {name} | {len(r['figures']['rows'])} rows: below | | | | | | |")
        elif "figures" in r:
            f, lex = r["figures"], r["figures"]["lexical"]
            print(f"| {name} | test micro-F1 {f['test_f1']:.3f} ({f['test_f1_ci'][0]:.3f}-{f['test_f1_ci'][1]:.3f}) over "
                  f"{f['num_test_documents']} pages, dev tuned {f['dev_f1_tuned']:.3f}; word matching "
                  f"{lex['test_f1']:.3f}, difference {f['minus_lexical']:+.3f} ({f['minus_lexical_ci'][0]:+.3f} to "
                  f"{f['minus_lexical_ci'][1]:+.3f}) | | | | | | |")
        elif "windows_per_s" in r:
            t4 = r["kernel_projection"]["T4 fp32"]
            print(f"| {name} | {r['precision']}, {r['layers']}x{r['hidden']} at {r['max_seq_length']} | "
                  f"{r['windows_per_s']:.1f} windows/s | {t4['this_device_x']:.1f}x the T4 fp32 projection | "
                  f"{r['hours_for_test_pages_here']:.2f} h for the test pages | | | |")
        else:
            print(f"| {name} | ok in {r['wall_s']} s | | | | | | |")
    if "recipe" in result:
        rec = result["recipe"]
        print(f"recipe: {rec.get('pages')} pages, {rec.get('stage2_windows')} windows, stage 1 {rec.get('stage1_s')} s, "
              f"stage 2 {rec.get('stage2_s')} s ({rec.get('stage2_windows_per_s') or 0:.0f} windows/s)"
              + (f"; pages cut: {rec['cut']}" if rec.get("cut") else ""))
    reading_report(result.get("reading", {}).get("figures"))
    for key, g in result.get("speed", {}).items():
        if isinstance(g, dict):
            figure = "not measured" if g["figure"] is None else f"{g['figure']:.3g}"
            print(f"goal {key}: {figure} (goal {g['goal']:g}): {'-' if g['met'] is None else 'met' if g['met'] else 'NOT met'}")
    for s in result["skipped"]:
        print(f"skipped {s['run']}: {s['why']}")


def reading_report(figures) -> None:
    """The reading part's rows: test micro-F1 with its interval, the margin over the best no-training row, YES
    and NO F1; then the paired comparisons."""
    if not figures:
        return
    def ci(v) -> str:
        return f"{v[0]:+.3f} to {v[1]:+.3f}" if v else "-"
    print("| reading row | test micro-F1 | minus the best no-training row | YES F1 | NO F1 |")
    print("|---|---|---|---|---|")
    for name, r in figures["rows"].items():
        f1 = "-" if r.get("test_f1") is None else f"{r['test_f1']:.3f} ({r['test_f1_ci'][0]:.3f}-{r['test_f1_ci'][1]:.3f})"
        margin = "-" if r.get("best_reference_delta") is None else (
            f"{r['best_reference']} {r['best_reference_delta']:+.3f} ({ci(r.get('best_reference_delta_ci'))})")
        yes, no = (("-" if r.get(k) is None else f"{r[k]:.3f}") for k in ("yes_f1", "no_f1"))
        print(f"| {name} | {f1} | {margin} | {yes} | {no} |")
    for name, pair in figures.get("paired", {}).items():
        for pages, d in (pair.items() if "main" in pair else [("main", pair)]):
            if "test_f1_delta" in d:
                print(f"{name}, {pages} pages: test {d['test_f1_delta']:+.3f} ({ci(d['test_f1_delta_ci'])}), dev "
                      f"{d.get('dev_f1_delta', 0):+.3f} ({ci(d.get('dev_f1_delta_ci'))})")
