"""The model card beside every saved model: what it says, metadata the Hub reads back, a folder the
fill-mask pipeline still loads, and the card in what ``push_to_hub`` uploads."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hp_mlm.checkpoints import save_model
from hp_mlm.config import get_settings
from hp_mlm.ops import card as card_module
from hp_mlm.ops.card import course_commit, hub_id, write_model_card

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pushed_run(tmp_path_factory):
    """The smoke job (one epoch, with its probes) pushed to a stand-in Hub that lists the folder it is given."""
    import huggingface_hub

    from hp_mlm.ops.job import run_job
    from hp_mlm.studies.probes import default_probes

    uploaded = {}

    class FakeApi:
        def __init__(self, token=None):
            pass

        def create_repo(self, repo_id, exist_ok=False):
            return f"https://hub.example/{repo_id}"

        def upload_folder(self, folder_path, repo_id, commit_message):
            uploaded[repo_id] = {p.name: p.read_bytes() for p in Path(folder_path).iterdir()}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(huggingface_hub, "HfApi", FakeApi)
        patch.setattr(huggingface_hub, "get_token", lambda: "hf_fake_token")
        patch.setattr("hp_mlm.hub.hub_reachable", lambda: True)  # the stand-in Hub answers
        out = tmp_path_factory.mktemp("carded")
        settings = get_settings("smoke", environ={}, epochs=1, output_dir=str(out), progress=False)
        metrics = run_job(settings, probes=default_probes(settings), push_to_hub="someone/hp-mlm-smoke", log=print)
    return out, metrics, uploaded


def test_push_to_hub_uploads_the_model_card_with_the_weights(pushed_run):
    out, metrics, uploaded = pushed_run
    files = uploaded["someone/hp-mlm-smoke"]
    assert {"README.md", "model.safetensors", "config.json"} <= set(files)
    assert files["README.md"] == (out / "model" / "README.md").read_bytes()
    text = files["README.md"].decode()
    assert 'pipeline("fill-mask", model="someone/hp-mlm-smoke")' in text and "# someone/hp-mlm-smoke" in text
    assert metrics["pushed_to"] == "https://hub.example/someone/hp-mlm-smoke"


def test_the_card_says_what_made_the_model_and_how_good_it_is(pushed_run):
    from huggingface_hub import ModelCard

    out, metrics, _ = pushed_run
    card = ModelCard.load(out / "model" / "README.md")
    text, before, after = card.text, metrics["before"], metrics["after"]
    assert "`hp_mlm:smoke-bert` fine-tuned" in text and "`hp_mlm:smoke-corpus` (split `train`)" in text
    # held-out before/after on the same masked tokens: top-1, top-5, perplexity, the count
    assert f"| top-1 accuracy | {before['top1']:.1%} | {after['top1']:.1%} |" in text
    assert f"| top-5 accuracy | {before['top5']:.1%} | {after['top5']:.1%} |" in text
    assert f"| perplexity | {before['perplexity']:.2f} | {after['perplexity']:.2f} |" in text
    assert f"| masked tokens scored | {before['n_positions']:,} | {after['n_positions']:,} |" in text
    probes = metrics["probes"]
    assert f"| {probes['before']['hits_top1']} of 10 | {probes['after']['hits_top1']} of 10 |" in text
    for setting in ("epochs", "batch_size", "learning_rate", "mlm_probability", "max_length", "seed"):
        assert f"| `{setting}` | {metrics['settings'][setting]} |" in text
    assert "output_dir" not in text  # a machine's path is not the model's business
    run, seconds = metrics["run"], metrics["seconds"]
    assert f"Trained on {run['device']} in {run['precision']}; training clock: {seconds['train_clock']:.0f} s" in text
    commit = course_commit()
    assert commit is None or f"commit `{commit}`" in text
    assert "## Intended use" in text and "## Limitations" in text and "A right\n  probe does not show" in text


def test_the_card_metadata_reads_back_as_the_hub_reads_it(pushed_run):
    from huggingface_hub import ModelCard, ModelCardData

    out, metrics, _ = pushed_run
    data = ModelCard.load(out / "model" / "README.md", ignore_metadata_errors=False).data
    assert data.pipeline_tag == "fill-mask" and data.library_name == "transformers"
    assert data.base_model is None and data.datasets is None  # the package's own model and corpus are no Hub ids
    assert ModelCardData(**data.to_dict()).to_dict() == data.to_dict()  # a round trip changes nothing
    scores = {r.metric_name.split(" at ")[0]: r.metric_value for r in data.eval_results}
    assert scores == {
        "top-1 accuracy": round(metrics["after"]["top1"], 4),
        "top-5 accuracy": round(metrics["after"]["top5"], 4),
        "perplexity": round(metrics["after"]["perplexity"], 4),
    }
    assert all(r.task_type == "fill-mask" and r.dataset_split == "train (held-out rows)" for r in data.eval_results)
    assert data.model_name == "someone/hp-mlm-smoke"


def test_hub_ids_go_into_the_metadata_and_local_paths_stay_out(tmp_path, smoke_model, smoke_tokenizer):
    from huggingface_hub import ModelCard
    from huggingface_hub.utils import validate_repo_id

    folder = save_model(smoke_model, smoke_tokenizer, tmp_path / "model")
    settings = {"model": "bert-base-uncased", "dataset": "andjela-r/mlm-harry-potter", "split": "train[:10%]"}
    write_model_card(folder, settings, after={"top1": 0.5, "top5": 0.75, "perplexity": 9.5, "n_positions": 80})
    data = ModelCard.load(folder / "README.md").data
    assert data.base_model == "bert-base-uncased" and data.datasets == ["andjela-r/mlm-harry-potter"]
    validate_repo_id(data.base_model)
    assert data.eval_results[0].dataset_type == "andjela-r/mlm-harry-potter"
    assert "| top-1 accuracy | not measured | 50.0% |" in ModelCard.load(folder / "README.md").text
    assert [hub_id(n) for n in ("hp_mlm:smoke-bert", str(tmp_path), "./model", "a/b/c", "bad id!")] == [None] * 5


def test_the_fill_mask_pipeline_still_loads_the_folder_with_its_card(pushed_run):
    from transformers import pipeline

    from hp_mlm.inference import fill_mask
    from hp_mlm.models import load_model

    out, _, _ = pushed_run
    assert (out / "model" / "README.md").is_file()
    pipe = pipeline("fill-mask", model=str(out / "model"), device="cpu")
    loaded = load_model(str(out / "model"))
    sentence = "Harry [MASK] is a wizard."
    expected = [c["token_id"] for c in fill_mask(loaded.model, loaded.tokenizer, sentence, top_k=3)[0][0]]
    assert [c["token"] for c in pipe(sentence, top_k=3)] == expected


def test_a_later_card_adds_to_what_an_earlier_one_recorded(tmp_path, smoke_model, smoke_tokenizer):
    """Notebook 03 writes the card from its training history; notebook 04 adds the before/after scores."""
    from huggingface_hub import ModelCard

    folder = save_model(smoke_model, smoke_tokenizer, tmp_path / "model")
    settings = get_settings("smoke", environ={})
    history = {
        "device": "cuda:0",
        "processes": 1,
        "precision": "bf16",
        "epochs": [{"seconds": 30.0, "validation": {"top1": 0.25, "top5": 0.5, "perplexity": 20.0, "n_positions": 90}}]
        * 2,
    }
    write_model_card(folder, settings, history=history)
    first = ModelCard.load(folder / "README.md").text
    assert "| top-1 accuracy | not measured | 25.0% |" in first and "training clock: 60 s" in first
    before, after = (
        {"top1": 0.01, "top5": 0.02, "perplexity": 900.0, "n_positions": 90},
        {**history["epochs"][0]["validation"], "top1": 0.3},
    )
    write_model_card(folder, settings, before=before, after=after, update=True)
    second = ModelCard.load(folder / "README.md").text
    assert "| top-1 accuracy | 1.0% | 30.0% |" in second and "Trained on cuda:0 in bf16; training clock: 60 s" in second
    write_model_card(folder, settings, before=before)  # without update: a fresh card
    assert "a time not recorded" in ModelCard.load(folder / "README.md").text
    with pytest.raises(FileNotFoundError, match="save_model first"):
        write_model_card(tmp_path / "nothing", settings)


def test_notebook_03s_card_says_where_the_watched_examples_came_from(tmp_path, smoke_model, smoke_tokenizer):
    """Notebook 03 writes the card from the history alone: examples picked from your held-out rows are
    said so there (the watch keeps their source), not called the corpus's own."""
    from huggingface_hub import ModelCard

    from hp_mlm.course.examples import PICKED

    folder = save_model(smoke_model, smoke_tokenizer, tmp_path / "model")
    watch = {"every": 10, "frames": [{"step": 0}], "first_right": [{"mask": "Tin [MASK]", "answer": "woodman",
                                                                     "step": 20, "seconds": 3.0}]}  # fmt: skip
    history = {"epochs": [{"seconds": 30.0, "validation": {"top1": 0.25, "perplexity": 20.0}}], "watch": watch}
    write_model_card(
        folder, get_settings("smoke", environ={}), history={**history, "watch": {**watch, "source": PICKED}}
    )
    assert f"example sentences ({PICKED})" in ModelCard.load(folder / "README.md").text
    write_model_card(folder, get_settings("smoke", environ={}), history=history)  # a watch of the corpus's own
    assert "example sentences (shipped with the corpus)" in ModelCard.load(folder / "README.md").text


def test_the_commit_is_this_checkouts_head():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert course_commit().removesuffix("-dirty") == head


def test_without_a_checkout_the_commit_is_the_one_pip_recorded(monkeypatch, tmp_path):
    class Installed:
        def read_text(self, name):
            assert name == "direct_url.json"
            return '{"url": "https://example.org/hp-mlm", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}'

    monkeypatch.setattr(card_module, "__file__", str(tmp_path / "hp_mlm" / "ops" / "card.py"))
    monkeypatch.setattr(card_module.metadata, "distribution", lambda name: Installed())
    assert course_commit() == "abc123"


def test_the_card_gives_the_logs_training_clock_named_so_not_the_phases_wall_time(
    tmp_path, smoke_model, smoke_tokenizer
):
    """The job's ``train`` phase holds validation between epochs too; the log's training clock does not."""
    from huggingface_hub import ModelCard

    from hp_mlm.ops.report import _time_lines

    folder = save_model(smoke_model, smoke_tokenizer, tmp_path / "model")
    seconds = {"train": 319.4, "train_clock": 306.2, "total": 400.0}
    write_model_card(folder, get_settings("smoke", environ={}), metrics={"run": {"device": "cpu"}, "seconds": seconds})
    text = ModelCard.load(folder / "README.md").text
    assert "training clock: 306 s (400 s for the whole job)" in text and "319 s" not in text  # not the phase
    assert _time_lines(seconds) == ["time: training clock 306 s, whole job 400 s"]  # the log's words, the same number
    resumed = {"train_clock": 105.0, "total": 53.0}  # a resumed run: its clock counts the first session too
    assert _time_lines(resumed) == [
        "time: training clock 105 s (every session of the run), this session's whole job 53 s"
    ]
    write_model_card(folder, get_settings("smoke", environ={}), metrics={"run": {"device": "cpu"}, "seconds": resumed})
    assert "training clock: 105 s over every session of the run (53 s for this session's whole job)" in (
        ModelCard.load(folder / "README.md").text
    )
