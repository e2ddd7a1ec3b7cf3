"""A Hugging Face cache laid out by hand, for tests without the Hub.

``lay_hf_cache(home)`` writes, under ``home`` (used as ``HF_HOME``), the project's tiny smoke BERT
as the Hub model ``bert-base-uncased`` and rows of the smoke corpus as the Hub dataset
``andjela-r/mlm-harry-potter`` (column ``text``, split ``train``), in the layouts the libraries
read offline:

- model: ``<HF_HOME>/hub/models--bert-base-uncased/snapshots/<commit>/...`` and ``refs/main``
  holding the commit (huggingface_hub's cache; plain files instead of blob links, which it reads
  the same way);
- dataset: ``<HF_HOME>/datasets/andjela-r___mlm-harry-potter/default/0.0.0/<hash>/`` with
  ``mlm-harry-potter-train.arrow`` and ``dataset_info.json`` (what ``datasets`` prepares, and what
  ``load_dataset`` reloads under ``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

from pathlib import Path

MODEL_ID = "bert-base-uncased"
DATASET_ID = "andjela-r/mlm-harry-potter"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
DATASET_HASH = "fedcba9876543210"


def hub_model_dir(home: Path, repo_id: str = MODEL_ID) -> Path:
    """Where huggingface_hub keeps ``repo_id``'s repository in the cache under ``home``."""
    return Path(home) / "hub" / ("models--" + repo_id.replace("/", "--"))


def datasets_cache_root(home: Path, repo_id: str = DATASET_ID) -> Path:
    """Where ``datasets`` keeps its prepared copies of ``repo_id`` under ``home``."""
    owner, name = repo_id.split("/")
    return Path(home) / "datasets" / f"{owner}___{name}"


def lay_model(home: Path, repo_id: str = MODEL_ID) -> Path:
    """Save the smoke tokenizer and model (safetensors) as ``repo_id`` in the hub cache; returns the snapshot."""
    from hp_mlm.models import build_smoke_model, build_smoke_tokenizer

    repo = hub_model_dir(home, repo_id)
    snapshot = repo / "snapshots" / COMMIT
    tokenizer = build_smoke_tokenizer()
    build_smoke_model(tokenizer).save_pretrained(snapshot, safe_serialization=True)
    tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def lay_dataset(home: Path, texts: list[str], repo_id: str = DATASET_ID) -> Path:
    """Write ``texts`` as split ``train`` (column ``text``) of ``repo_id`` in the datasets cache."""
    import datasets
    from datasets.arrow_writer import ArrowWriter

    name = repo_id.split("/")[-1]
    folder = datasets_cache_root(home, repo_id) / "default" / "0.0.0" / DATASET_HASH
    folder.mkdir(parents=True)
    features = datasets.Features({"text": datasets.Value("string")})
    with ArrowWriter(features=features, path=str(folder / f"{name}-train.arrow")) as writer:
        writer.write_batch({"text": texts})
        n_rows, n_bytes = writer.finalize()
    splits = datasets.SplitDict(dataset_name=name)
    splits.add(datasets.SplitInfo(name="train", num_bytes=n_bytes, num_examples=n_rows, dataset_name=name))
    info = datasets.DatasetInfo(
        features=features, splits=splits, config_name="default", dataset_name=name, version="0.0.0"
    )
    info.write_to_directory(str(folder))
    return folder


def smoke_texts(n_rows: int = 300) -> list[str]:
    """The first ``n_rows`` non-empty lines of the package's smoke corpus."""
    from importlib import resources

    from hp_mlm.profiles import PACKAGE_DATASETS, SMOKE_DATASET

    corpus = resources.files("hp_mlm") / "corpora" / PACKAGE_DATASETS[SMOKE_DATASET]
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[:n_rows]


def lay_hf_cache(home: Path) -> Path:
    """Lay the model and the dataset into a Hugging Face cache at ``home`` (to use as ``HF_HOME``)."""
    lay_model(home)
    lay_dataset(home, smoke_texts())
    return Path(home)
