"""The ``hookscope`` command: the window by default, headless ``export`` and ``bench`` subcommands.

Every error a user can cause ends in one readable line on stderr and a non-zero exit; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch  # noqa: F401  (torch before any Qt import: a known DLL clash on Windows otherwise)

from app import __version__
from app.core.errors import HookscopeError
from app.core.hooks import KINDS

SUBCOMMANDS = ("export", "bench")


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _target(text: str) -> str | int:
    if text == "top1":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"target must be 'top1' or a class index, not '{text}'") from None


def _kinds(text: str) -> list[str]:
    kinds = _csv(text)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise argparse.ArgumentTypeError(f"hook kinds are {', '.join(KINDS)}; got '{text}'")
    return kinds


def _add_model_options(parser: argparse.ArgumentParser, default_weights: str) -> None:
    parser.add_argument("--model", default="resnet18", help="torchvision model name (default: resnet18)")
    parser.add_argument(
        "--weights",
        default=default_weights,
        help="'none' (random, seeded), 'default' (pretrained, from the torch hub cache) or a state_dict file",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for random weights (default: 0)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (default: cpu)")


def build_parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, argparse.ArgumentParser]:
    gui = argparse.ArgumentParser(
        prog="hookscope",
        description="Look inside a PyTorch network: tick modules, drop an image, see what they compute.",
        epilog="Headless: 'hookscope export --help' and 'hookscope bench --help'.",
    )
    gui.add_argument("image", nargs="?", help="image to open (default: the bundled sample photograph)")
    _add_model_options(gui, default_weights="default")
    gui.add_argument("--screenshot", metavar="OUT.png", help="save a screenshot of the window after the run and exit")
    gui.add_argument("--check", type=_csv, metavar="PATH,PATH", help="modules to tick for activations and gradients")
    gui.add_argument("--self-test", action="store_true", help="run the app offscreen end to end and report")
    gui.add_argument("--debug", action="store_true", help="show tracebacks")
    gui.add_argument("--version", action="version", version=f"hookscope {__version__}")

    export = argparse.ArgumentParser(prog="hookscope export", description="Run images through a hooked model and write what the hooks saw.")
    _add_model_options(export, default_weights="none")
    export.add_argument("--image", action="append", required=True, help="image file (repeat for several)")
    export.add_argument("--layers", default="all", help="'all' or module paths separated by commas (default: all)")
    export.add_argument("--hooks", type=_kinds, default=["forward", "backward"], help="kinds: forward,pre,backward,tensor")
    export.add_argument("--target", type=_target, default="top1", help="'top1' or a class index for the gradient")
    export.add_argument("--out", default="hookscope-out", help="output folder (default: hookscope-out)")
    export.add_argument("--no-png", action="store_true", help="skip the PNG mosaics")
    export.add_argument("--debug", action="store_true", help="show tracebacks")

    bench = argparse.ArgumentParser(prog="hookscope bench", description="Time hooked against bare forward+backward.")
    _add_model_options(bench, default_weights="none")
    bench.add_argument("--layers", default="all", help="'all' or module paths separated by commas")
    bench.add_argument("--hooks", type=_kinds, default=["forward", "backward"], help="kinds to register per layer")
    bench.add_argument("--size", type=int, default=224, help="input size in pixels (default: 224)")
    bench.add_argument("--repeat", type=int, default=10, help="timed pairs (default: 10)")
    bench.add_argument("--debug", action="store_true", help="show tracebacks")
    return gui, export, bench


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    gui, export, bench = build_parsers()
    if args_list and args_list[0] in SUBCOMMANDS:
        parser = export if args_list[0] == "export" else bench
        args = parser.parse_args(args_list[1:])
        command = run_export if args_list[0] == "export" else run_bench
    else:
        args = gui.parse_args(args_list)
        command = run_window
    try:
        return command(args)
    except HookscopeError as error:
        if args.debug:
            raise
        print(f"hookscope: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hookscope: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug, not the user's fault: still one line unless asked
        if args.debug:
            raise
        print(f"hookscope: unexpected error: {type(error).__name__}: {error} (run with --debug for details)", file=sys.stderr)
        return 1


def _select_layers(spec: str, available: list[str]) -> list[str]:
    if spec == "all":
        return available
    layers = _csv(spec)
    missing = [p for p in layers if p not in available]
    if missing:
        raise HookscopeError(f"The model has no module named {', '.join(repr(m) for m in missing)}.")
    return layers


def _output_folders(images: list[str], out: Path) -> list[Path]:
    """One folder for one image; one subfolder per image (named by its stem, made unique) for several."""
    if len(images) == 1:
        return [out]
    folders, used = [], set()
    for image in images:
        stem = Path(image).stem or "image"
        name, n = stem, 1
        while name in used:
            n += 1
            name = f"{stem}-{n}"
        used.add(name)
        folders.append(out / name)
    return folders


def load_for_cli(args: argparse.Namespace):
    """The model the command line asked for (catalogue name and weights), with its notice printed."""
    from app.core.models import load_model

    loaded = load_model(args.model, args.weights, args.seed)
    if loaded.notice:
        print(f"hookscope: {loaded.notice}", file=sys.stderr)
    return loaded


def register_for_cli(registry, args: argparse.Namespace) -> None:
    """Register the requested hooks (and, later, edits) on the registry."""
    for path in _select_layers(args.layers, registry.paths):
        for kind in args.hooks:
            registry.add(path, kind)


def run_export(args: argparse.Namespace) -> int:
    from app.core.capture import capture_run
    from app.core.devices import resolve_device
    from app.core.export import write_run
    from app.core.hooks import HookRegistry
    from app.core.images import read_image

    resolve_device(args.device)
    images = [read_image(path) for path in args.image]  # fail on a bad image before the slow part
    loaded = load_for_cli(args)
    with HookRegistry(loaded.module) as registry:
        register_for_cli(registry, args)
        for name, image, folder in zip(args.image, images, _output_folders(args.image, Path(args.out))):
            x = loaded.preprocess.to_tensor(image)
            result = capture_run(
                loaded.module, registry, x, device=args.device, target=args.target, categories=loaded.categories
            )
            write_run(result, loaded, folder, image=name, kinds=tuple(args.hooks), png=not args.no_png)
            top = result.top5[0] if result.top5 else None
            best = f"{top.label} ({top.probability:.1%})" if top else "no class scores"
            print(f"{name}: {len(result.records)} records -> {folder}  top-1: {best}")
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from app.core.bench import benchmark
    from app.core.models import load_model

    loaded = load_model(args.model, "none" if args.weights == "default" else args.weights, args.seed)
    paths = _select_layers(args.layers, [p for p, _ in loaded.module.named_modules()])
    result = benchmark(loaded.module, paths, tuple(args.hooks), args.size, args.repeat)
    print(
        f"{args.model} {args.size}x{args.size} on cpu, {len(paths)} modules, {result.hooks} hooks "
        f"({'+'.join(args.hooks)}), {args.repeat} interleaved pairs: "
        f"bare median {result.bare_median:.1f} ms, hooked median {result.hooked_median:.1f} ms, "
        f"ratio (median of pairs) {result.ratio:.3f}"
    )
    return 0


def run_window(args: argparse.Namespace) -> int:
    from app.ui.app import run_gui

    return run_gui(
        image=args.image,
        model=args.model,
        weights=args.weights,
        device=args.device,
        screenshot=args.screenshot,
        check=args.check,
        self_test=args.self_test,
    )


if __name__ == "__main__":
    raise SystemExit(main())
