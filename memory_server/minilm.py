"""A BERT sentence encoder (all-MiniLM-L6-v2 and its kind) run with numpy: tokens, six transformer layers, mean
pooling, unit length, as sentence-transformers computes them.

Why by hand: the maintained runtimes need torch (sentence-transformers, transformers) or an ONNX export made with
torch; the weights ship as safetensors. The forward pass is a dozen matrix products per layer, which numpy's BLAS
runs as fast as they would; `tokenizers` and `safetensors` come with model2vec already.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from memory_server.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy")

MAX_TOKENS = 256  # a text longer than this is read from its start, as sentence-transformers reads it
BATCH = 32


class SentenceEncoder:
    """Unit vectors for texts from a BERT model folder (config.json, model.safetensors, tokenizer.json)."""

    def __init__(self, folder: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{folder} holds no BERT model with gelu (config.json: {config.get('model_type')!r})")
        self.folder = folder
        self.heads = int(config["num_attention_heads"])
        if int(config["hidden_size"]) % self.heads:
            raise ValueError(f"{folder}: hidden_size {config['hidden_size']} is not a multiple of {self.heads} heads")
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        weights = load_file(str(folder / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.w = {k[len(prefix) :]: v.astype(np.float32) for k, v in weights.items() if k.startswith(prefix)}
        for i in range(self.layers):  # one product for query, key and value
            at = f"encoder.layer.{i}.attention.self."
            parts = [self.w.pop(f"{at}{p}.weight") for p in ("query", "key", "value")]
            self.w[f"{at}qkv.weight"] = np.ascontiguousarray(np.concatenate(parts).T)
            self.w[f"{at}qkv.bias"] = np.concatenate([self.w.pop(f"{at}{p}.bias") for p in ("query", "key", "value")])
        for name in [k for k in self.w if k.endswith(".weight") and ("dense" in k)]:
            self.w[name] = np.ascontiguousarray(self.w[name].T)  # (in, out): x @ w
        self.dim = int(config["hidden_size"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        bert = folder / "sentence_bert_config.json"
        longest = json.loads(bert.read_text(encoding="utf-8")).get("max_seq_length") if bert.is_file() else None
        positions = len(self.w["embeddings.position_embeddings.weight"])
        self.tokenizer.enable_truncation(min(int(longest or MAX_TOKENS), positions))
        self.tokenizer.no_padding()
        if not np.isfinite(self.encode(["a sentence"])).all():  # NaN weights load, then would fill the cache
            raise ValueError(f"{folder}: the model gives vectors that are not finite numbers")

    def encode(self, texts: list[str]) -> np.ndarray:
        """One unit vector (float32) per text."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        # A lone surrogate (valid in a Python str, not in UTF-8) would make the tokenizer fail: it reads as "?".
        encodings = self.tokenizer.encode_batch([t.encode("utf-8", "replace").decode("utf-8") for t in texts])
        order = sorted(range(len(texts)), key=lambda n: len(encodings[n].ids))  # batches of like lengths pad little
        for start in range(0, len(order), BATCH):
            chosen = order[start : start + BATCH]
            width = max(len(encodings[n].ids) for n in chosen)
            ids = np.zeros((len(chosen), width), dtype=np.int64)
            mask = np.zeros((len(chosen), width), dtype=np.float32)
            for row, n in enumerate(chosen):
                tokens = encodings[n].ids
                ids[row, : len(tokens)] = tokens
                mask[row, : len(tokens)] = 1.0
            out[chosen] = self._forward(ids, mask)
        return out

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        batch, width = ids.shape
        x = w["embeddings.word_embeddings.weight"][ids]
        x += w["embeddings.position_embeddings.weight"][:width]
        x += w["embeddings.token_type_embeddings.weight"][0]
        x = self._norm(x, "embeddings.LayerNorm")
        hidden = x.shape[-1]
        size = hidden // self.heads
        blocked = (1.0 - mask)[:, None, None, :] * np.float32(-1e9)  # padding gets no attention
        for i in range(self.layers):
            layer = f"encoder.layer.{i}."
            qkv = x @ w[f"{layer}attention.self.qkv.weight"] + w[f"{layer}attention.self.qkv.bias"]
            qkv = qkv.reshape(batch, width, 3, self.heads, size).transpose(2, 0, 3, 1, 4)
            scores = qkv[0] @ qkv[1].transpose(0, 1, 3, 2) * np.float32(1 / np.sqrt(size)) + blocked
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ qkv[2]).transpose(0, 2, 1, 3).reshape(batch, width, hidden)
            attended = context @ w[f"{layer}attention.output.dense.weight"] + w[f"{layer}attention.output.dense.bias"]
            x = self._norm(attended + x, f"{layer}attention.output.LayerNorm")
            inner = _gelu(x @ w[f"{layer}intermediate.dense.weight"] + w[f"{layer}intermediate.dense.bias"])
            x = self._norm(inner @ w[f"{layer}output.dense.weight"] + w[f"{layer}output.dense.bias"] + x,
                           f"{layer}output.LayerNorm")
        pooled = (x * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        centred = x - mean
        variance = (centred * centred).mean(axis=-1, keepdims=True)
        return centred / np.sqrt(variance + self.eps) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact gelu, x * Phi(x), with erf from Abramowitz and Stegun 7.1.26 (error under 1.5e-7): numpy has
    no erf, and the tanh approximation moves the vectors by more."""
    z = np.abs(x) * np.float32(1 / np.sqrt(2))
    t = 1.0 / (1.0 + np.float32(0.3275911) * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return x * np.float32(0.5) * (1.0 + np.sign(x) * erf)
