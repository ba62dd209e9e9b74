"""A Hugging Face Hub on 127.0.0.1: real HTTP, the endpoints huggingface_hub calls, tiny repos saved by the test.

``HubServer(folder)`` serves ``folder/ORG/NAME/...`` as the model repo ``ORG/NAME`` (one commit, its hash derived
from the repo's name), answering what ``huggingface_hub`` 2.x asks (read from its ``hf_api.py`` and
``file_download.py``):

- ``GET /api/models/ORG/NAME`` and ``.../revision/REV``: the repo's info (``sha``, ``siblings``);
- ``HEAD``/``GET /ORG/NAME/resolve/REV/FILE``: ``X-Repo-Commit``, ``ETag`` (the git blob's SHA-1 for small files;
  for weights, as git LFS does, ``X-Linked-Etag`` with the SHA-256 and ``X-Linked-Size``), ``Content-Length``,
  ``Accept-Ranges`` and ``Range`` requests (206, ``Content-Range``) for resumed downloads;
- 404 with ``X-Error-Code: RepoNotFound`` or ``EntryNotFound``, and for the repos in ``gated`` a public info
  (``"gated": "manual"``) but 401 ``GatedRepo`` for their files, as the Hub answers without access.

``drop_once``: files whose first full GET sends the headers and half the body, then closes the connection (a
network cut). ``slow``: files sent 8 kB at a time, 0.1 s apart (time to press Cancel). ``stall``: files whose every
GET sends half of what was asked, then nothing more, the connection held open (until ``unstall`` is set). ``requests`` lists ``(method, path, Range header)`` as they came. ``make_*`` build the tiny repos.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

LFS_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")  # served as git LFS files, as the Hub does


def commit_of(repo: str) -> str:
    return hashlib.sha1(f"commit {repo}".encode()).hexdigest()


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer(http.server.ThreadingHTTPServer):
    def __init__(self, folder: Path, gated: tuple[str, ...] = (), drop_once: tuple[str, ...] = (),
                 slow: tuple[str, ...] = (), stall: tuple[str, ...] = ()) -> None:  # fmt: skip
        super().__init__(("127.0.0.1", 0), _Handler)
        self.folder = Path(folder)
        self.gated = set(gated)
        self.drop_once = set(drop_once)
        self.slow = set(slow)
        self.stall = set(stall)
        self.unstall = threading.Event()  # set: the stalled answers end (their connections close)
        self.requests: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()

    def repo_folder(self, repo: str) -> Path | None:
        folder = self.folder / repo
        return folder if repo.count("/") == 1 and folder.is_dir() else None

    def files(self, repo: str) -> list[str]:
        folder = self.folder / repo
        return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


class _Handler(http.server.BaseHTTPRequestHandler):
    server: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet: the test reads ``requests``
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _error(self, status: int, code: str, message: str) -> None:
        data = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _json(self, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _answer(self, body: bool) -> None:
        path = unquote(urlparse(self.path).path)
        with self.server.lock:
            self.server.requests.append((self.command, path, self.headers.get("Range")))
        parts = path.strip("/").split("/")
        if len(parts) >= 4 and parts[0] == "api" and parts[1] == "models":
            repo = "/".join(parts[2:4])
            if not self._repo_ok(repo, info=True):  # a gated repo's info is public, as on the Hub; its files are not
                return
            files = self.server.files(repo)
            gated = "manual" if repo in self.server.gated else False
            self._json({"id": repo, "modelId": repo, "sha": commit_of(repo), "private": False, "gated": gated,
                        "siblings": [{"rfilename": name} for name in files], "tags": []})  # fmt: skip
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = "/".join(parts[:2])
            if not self._repo_ok(repo):
                return
            self._file(repo, "/".join(parts[4:]), body)
            return
        self._error(404, "RepoNotFound", "Repository not found")

    def _repo_ok(self, repo: str, info: bool = False) -> bool:
        if self.server.repo_folder(repo) is None:
            self._error(404, "RepoNotFound", "Repository not found")
            return False
        if repo in self.server.gated and not info:
            self._error(401, "GatedRepo", "Access to model is restricted. You must have access to it.")
            return False
        return True

    def _file(self, repo: str, name: str, body: bool) -> None:
        path = self.server.folder / repo / name
        if not path.is_file():
            self._error(404, "EntryNotFound", "Entry not found")
            return
        data = path.read_bytes()
        start, status = 0, 200
        wanted = self.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            first = wanted[len("bytes=") :].split("-")[0]
            start, status = int(first or 0), 206
        self.send_response(status)
        self.send_header("X-Repo-Commit", commit_of(repo))
        self.send_header("Accept-Ranges", "bytes")
        if name.endswith(LFS_SUFFIXES):
            sha256 = hashlib.sha256(data).hexdigest()
            self.send_header("ETag", f'"{sha256}"')
            self.send_header("X-Linked-Etag", f'"{sha256}"')
            self.send_header("X-Linked-Size", str(len(data)))
        else:
            self.send_header("ETag", f'"{git_blob_sha1(data)}"')
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        if not body:
            return
        rest = data[start:]
        key = f"{repo}/{name}"
        with self.server.lock:
            drop = status == 200 and key in self.server.drop_once
            self.server.drop_once.discard(key)
        if drop:  # half the body, then the connection goes: a network cut in the middle of the file
            self.wfile.write(rest[: len(rest) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if key in self.server.stall:  # half of what was asked, then nothing more on an open connection
            self.wfile.write(rest[: len(rest) // 2])
            self.wfile.flush()
            self.server.unstall.wait(120)
            self.close_connection = True
            return
        if key in self.server.slow:
            for start in range(0, len(rest), 8192):
                self.wfile.write(rest[start : start + 8192])
                self.wfile.flush()
                time.sleep(0.1)
            return
        self.wfile.write(rest)


# ============================================================================================ the repos ====
def make_vit(folder: Path, labels: int = 3) -> Path:
    """A ViT classifier (hidden 32, 2 layers, 32 px) with its image processor (resize to 40 x 40, bicubic)."""
    import torch
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                       image_size=40, patch_size=8, num_labels=labels,
                       id2label={i: f"thing{i}" for i in range(labels)},
                       label2id={f"thing{i}": i for i in range(labels)})  # fmt: skip
    ViTForImageClassification(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 40, "width": 40}, image_mean=[0.5, 0.4, 0.3], image_std=[0.2, 0.25, 0.3],
                      resample=3).save_pretrained(folder)  # fmt: skip
    return folder


def make_segformer(folder: Path) -> Path:
    import torch
    from transformers import SegformerConfig, SegformerForSemanticSegmentation, SegformerImageProcessor

    torch.manual_seed(0)
    config = SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        patch_sizes=[7, 3],
        strides=[4, 2],
        num_attention_heads=[1, 2],
        mlp_ratios=[2, 2],
        decoder_hidden_size=16,
        num_labels=4,
        id2label={i: f"part{i}" for i in range(4)},
        label2id={f"part{i}": i for i in range(4)},
    )
    SegformerForSemanticSegmentation(config).save_pretrained(folder)
    SegformerImageProcessor(size={"height": 64, "width": 64}).save_pretrained(folder)
    return folder


def make_clip(folder: Path) -> Path:
    """A tiny CLIP with a word-level tokenizer built offline (``tokenizers``), and CLIP's image processor."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, PreTrainedTokenizerFast

    torch.manual_seed(0)
    words = ["<pad>", "<unk>", "<s>", "</s>", "a", "photo", "of", "dog", "cat"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    # CLIP pools the text at its end token: the tokenizer must add it, as CLIP's own does.
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 2), ("</s>", 3)]
    )
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>", model_max_length=16).save_pretrained(folder)  # fmt: skip
    config = CLIPConfig(
        text_config={"vocab_size": len(words), "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "max_position_embeddings": 16, "eos_token_id": 3, "bos_token_id": 2,
                     "pad_token_id": 0},
        vision_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "image_size": 32, "patch_size": 8},
        projection_dim=8,
    )  # fmt: skip
    CLIPModel(config).save_pretrained(folder)
    CLIPImageProcessor(size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def make_dino(folder: Path) -> Path:
    """A ViT backbone (``ViTModel``, pooled output) as an image encoder."""
    import torch
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                       image_size=32, patch_size=8)  # fmt: skip
    ViTModel(config).save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def make_dinov2_with_registers(folder: Path, side: int = 56, patch: int = 14, registers: int = 4) -> Path:
    """A DINOv2 with registers (hidden 32, 2 layers, 2 heads; 56 px in 14 px patches: a 4 x 4 grid after the class
    token and 4 registers) with DINOv2's image processor."""
    import torch
    from transformers import BitImageProcessor, Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    torch.manual_seed(0)
    config = Dinov2WithRegistersConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
                                       image_size=side, patch_size=patch, num_register_tokens=registers)  # fmt: skip
    Dinov2WithRegistersModel(config).save_pretrained(folder)
    BitImageProcessor(size={"shortest_edge": side}, crop_size={"height": side, "width": side},
                      image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]).save_pretrained(folder)  # fmt: skip
    return folder


def make_bert(folder: Path) -> Path:
    """A text model's repo: only its config (enough to be refused)."""
    from transformers import BertConfig

    BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
               architectures=["BertForMaskedLM"]).save_pretrained(folder)  # fmt: skip
    return folder


def make_mae(folder: Path) -> Path:
    """An image model for another task (masked autoencoder pre-training): only its config."""
    from transformers import ViTMAEConfig

    ViTMAEConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=32,
                 patch_size=8, architectures=["ViTMAEForPreTraining"]).save_pretrained(folder)  # fmt: skip
    return folder


def make_timm(folder: Path, arch: str = "test_resnet") -> Path:
    """timm's ``timm/ARCH.TAG`` repo: ``model.safetensors`` and ``config.json`` as timm publishes them."""
    import timm
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(1)
    model = timm.create_model(arch, pretrained=False)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"architecture": arch, "num_classes": model.num_classes}))
    return folder


def use_hub(monkeypatch, server, home) -> None:
    """Point this process (and the commands it starts) at ``server`` with an empty cache in ``home``, online.

    huggingface_hub reads ``HF_HUB_OFFLINE`` once, when it is first imported: a test module that set it for its own
    models (tests/core/test_class_scores.py builds transformers models from configs offline) leaves the client
    offline for the rest of the run, so the flag is reset on the module too, not only in the environment."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", server.base)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
