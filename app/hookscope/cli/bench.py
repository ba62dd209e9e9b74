"""``hookscope bench``: the cost of the hooks, measured. Hooked against bare forward+backward (and a plain-PyTorch
floor) on one model; with ``--batch`` the throughput of ``export --images``; with ``--scan`` that of ``hookscope
scan``. The measuring is in ``hookscope.core.bench``; this prints its lines.
"""

from __future__ import annotations

import argparse
import sys

from hookscope.cli.common import add_model_options, comma_list, hooks_help, kinds_argument, select_layers


def build_bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hookscope bench", description="Time hooked against bare forward+backward.")
    add_model_options(parser, default_weights="none")
    parser.add_argument(
        "--layers", help="'all' (default) or module paths separated by commas; with --batch: 10 spread modules"
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="batch throughput: 'export --images' against bare inference and a plain PyTorch + np.savez floor",
    )
    parser.add_argument("--images", type=int, default=100, metavar="N", help="with --batch: images (default: 100)")
    parser.add_argument(
        "--hooks",
        type=kinds_argument,
        default=["forward", "backward"],
        help=f"to register on each layer: {hooks_help('act,grad_out')}",
    )
    parser.add_argument("--size", type=int, default=224, help="input size in pixels (default: 224)")
    parser.add_argument("--repeat", type=int, default=10, help="timed pairs (default: 10)")
    parser.add_argument(
        "--scan",
        action="store_true",
        help="dataset scan throughput ('hookscope scan') against bare batched inference (--images N of them, 4 spread modules or --layers)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=16, metavar="N", help="with --scan: images per batch (default: 16)"
    )
    parser.add_argument(
        "--capture",
        action="store_true",
        help="hookscope.capture (Python) with act and grad on every module against the plain PyTorch a script writes "
        "for the same records, hooks registered and removed in each call",
    )
    parser.add_argument(
        "--attention",
        action="store_true",
        help="a transformer's forward+backward with Attn ticked on every attention module (recording, and not) "
        "against the model alone and against its eager attention",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def run_bench(args: argparse.Namespace) -> int:
    if args.attention:
        return run_bench_attention(args)
    if args.capture:
        return run_bench_capture(args)
    if args.scan:
        return run_bench_scan(args)
    if args.batch:
        return run_bench_batch(args)
    from hookscope.core.bench.hooks import benchmark
    from hookscope.core.models.source import ModelSource, open_model

    weights = "none" if args.weights == "default" else args.weights
    loaded = open_model(ModelSource(name=args.model, weights=weights, seed=args.seed))
    paths = select_layers(args.layers or "all", [p for p, _ in loaded.module.named_modules()])
    result = benchmark(loaded.module, paths, tuple(args.hooks), args.size, args.repeat)
    print(
        f"{args.model} {args.size}x{args.size} on cpu, {len(paths)} modules, {result.hooks} hooks "
        f"({'+'.join(args.hooks)}), {args.repeat} interleaved rounds: medians bare {result.bare_median:.1f} ms, "
        f"floor (plain PyTorch hooks) {result.floor_median:.1f} ms, Hookscope {result.hooked_median:.1f} ms"
    )
    print(
        f"ratios (median of rounds): Hookscope/bare {result.ratio:.3f}, floor/bare {result.floor_ratio:.3f}, "
        f"Hookscope/floor {result.above_floor:.3f}"
    )
    return 0


def run_bench_batch(args: argparse.Namespace) -> int:
    """bench --batch: export --images throughput against bare inference and a plain-script floor over the same
    files, in one process."""
    from statistics import median

    import torch

    from hookscope.core.bench.batch import batch_benchmark

    layers: int | list[str] = (
        10 if args.layers is None else (1 << 30 if args.layers == "all" else comma_list(args.layers))
    )
    result = batch_benchmark(
        args.images,
        layers,
        model=args.model,
        kinds=tuple(args.hooks),
        note=lambda text: print(f"hookscope: {text}", file=sys.stderr),
    )
    print(f"modules hooked ({'+'.join(result.kinds)}): {', '.join(result.modules)}")
    print(
        f"{args.model}, {result.images} images, {len(result.modules)} modules, PNGs off, interleaved rounds of "
        f"{result.chunk} (each side first in turn): bare {result.bare_rate:.2f} img/s, floor (plain PyTorch hooks + "
        f"np.savez) {result.floor_rate:.2f} img/s, batch {result.batch_rate:.2f} img/s"
    )
    print(
        f"throughput ratio (all images): batch/bare {result.ratio:.3f}, floor/bare {result.floor_ratio:.3f}, "
        f"batch/floor {result.above_floor:.3f}"
    )
    print(
        f"wrote: batch {result.batch_bytes / 1e9:.3f} GB, floor {result.floor_bytes / 1e9:.3f} GB "
        f"(batch/floor bytes {result.batch_bytes / max(1, result.floor_bytes):.3f})"
    )
    print(f"per-round ratios ({torch.get_num_threads()} torch threads):")
    for label, ratios in (
        ("batch/bare", result.round_ratios),
        ("floor/bare", result.round_floor_ratios),
        ("batch/floor", result.round_above_floor),
    ):
        print(f"  {label} median {median(ratios):.3f}: " + ", ".join(f"{r:.2f}" for r in ratios))
    return 0


def run_bench_scan(args: argparse.Namespace) -> int:
    """bench --scan: the scan's throughput against bare batched inference over the same files, in one process."""
    from hookscope.core.bench.scan import report, scan_benchmark

    layers: int | list[str] = 4 if args.layers is None else [p.strip() for p in args.layers.split(",") if p.strip()]
    result = scan_benchmark(args.images, layers, model=args.model, batch_size=args.batch_size,
                            size=args.size,
                            note=lambda text: print(f"hookscope: {text}", file=sys.stderr))  # fmt: skip
    for line in report(result):
        print(line)
    return 0


def run_bench_attention(args: argparse.Namespace) -> int:
    """--attention: the Attn tick's cost on every attention module of a transformer (``core.bench.attention``)."""
    from hookscope.core.bench.attention import attention_benchmark, report
    from hookscope.core.models.source import ModelSource, open_model

    weights = "none" if args.weights == "default" else args.weights
    loaded = open_model(ModelSource(name=args.model, weights=weights, seed=args.seed))
    result = attention_benchmark(loaded.module, args.size, args.repeat)
    for line in report(result, f"{args.model} {args.size}x{args.size} on cpu"):
        print(line)
    return 0


def run_bench_capture(args: argparse.Namespace) -> int:
    """--capture: ``hookscope.capture`` on every module (act and grad) against its plain-PyTorch floor."""
    from hookscope.core.bench.capture import capture_benchmark, report
    from hookscope.core.models.source import ModelSource, open_model

    weights = "none" if args.weights == "default" else args.weights
    loaded = open_model(ModelSource(name=args.model, weights=weights, seed=args.seed))
    modules = sum(1 for path, _ in loaded.module.named_modules() if path)
    times = capture_benchmark(loaded.module, args.size, args.repeat)
    print(report(times, f"{args.model} {args.size}x{args.size} on cpu, every module ({modules}) with act and grad"))
    return 0
