"""``gpuwatch plan kv``'s arithmetic against figures computed by hand.

The configs are the published ``config.json`` fields of each model (Hugging Face model cards),
written here: nothing is downloaded. Each expected figure is worked out in the comment above
it, so a broken step fails with a number a person can check.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.load.spec import Dist
from gpuwatch.plan.kv import (
    KvInputs,
    PlanError,
    dist_quantile,
    inputs_from_profile,
    plan_kv,
    render_explain,
    render_table,
)
from gpuwatch.plan.modelconfig import ConfigError, ModelShape, load_config, shape_from_config
from gpuwatch.sim.profiles import GIB, PROFILES, get_profile
from tests.conftest import FIXTURES, fixture_text

MIB = 2**20

# meta-llama/Meta-Llama-3-8B
LLAMA3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
# meta-llama/Meta-Llama-3-70B: 64 query heads share 8 KV heads (GQA)
LLAMA3_70B: dict[str, Any] = {
    **LLAMA3_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
}
# mistralai/Mistral-7B-v0.1: a 4096-token sliding window on every layer
MISTRAL_7B: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}
# Qwen/Qwen2.5-7B-Instruct: sliding_window is present but use_sliding_window is false
QWEN25_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 152064,
}
# Qwen/Qwen2.5-14B-Instruct-AWQ: 4-bit weights, float16 KV
QWEN25_14B_AWQ: dict[str, Any] = {
    **QWEN25_7B,
    "hidden_size": 5120,
    "intermediate_size": 13824,
    "max_window_layers": 48,
    "num_attention_heads": 40,
    "num_hidden_layers": 48,
    "num_key_value_heads": 8,
    "torch_dtype": "float16",
    "quantization_config": {
        "bits": 4,
        "group_size": 128,
        "modules_to_not_convert": None,
        "quant_method": "awq",
        "version": "gemm",
        "zero_point": True,
    },
}
# google/gemma-2-9b: float32 checkpoint, no tie_word_embeddings key (Gemma2Config ties), a
# 4,096-token window on every second layer, head_dim 256 written out
GEMMA2_9B: dict[str, Any] = {
    "architectures": ["Gemma2ForCausalLM"],
    "attention_bias": False,
    "cache_implementation": "hybrid",
    "head_dim": 256,
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "gemma2",
    "num_attention_heads": 16,
    "num_hidden_layers": 42,
    "num_key_value_heads": 8,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "torch_dtype": "float32",
    "vocab_size": 256000,
}
# deepseek-ai/DeepSeek-V2-Lite: MLA (no q_lora_rank in Lite), 64 routed + 2 shared experts,
# the first layer dense
DEEPSEEK_V2_LITE: dict[str, Any] = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "attention_bias": False,
    "first_k_dense_replace": 1,
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v2",
    "moe_intermediate_size": 1408,
    "moe_layer_freq": 1,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_attention_heads": 16,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "v_head_dim": 128,
    "vocab_size": 102400,
}
# Qwen/Qwen3-30B-A3B: 128 experts of 768 on every layer, GQA 32/4 with head_dim 128
QWEN3_30B_A3B: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "decoder_sparse_step": 1,
    "head_dim": 128,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 151936,
}
# facebook/opt-125m: no num_key_value_heads (MHA), no head_dim, no intermediate_size
OPT_125M: dict[str, Any] = {
    "architectures": ["OPTForCausalLM"],
    "ffn_dim": 3072,
    "hidden_size": 768,
    "max_position_embeddings": 2048,
    "model_type": "opt",
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "torch_dtype": "float16",
    "vocab_size": 50272,
}


def inputs(shape: ModelShape, gpu_bytes: float, **kw: Any) -> KvInputs:
    kw.setdefault("weight_bytes", shape.weight_bytes)
    return KvInputs(shape=shape, gpu_bytes=gpu_bytes, gpu_from="test", weights_from="test", **kw)


# --- the shapes ------------------------------------------------------------------------------


def test_llama3_8b_shape_and_published_parameter_count() -> None:
    s = shape_from_config(LLAMA3_8B)
    assert (s.layers, s.kv_heads, s.head_dim, s.dtype_bytes) == (32, 8, 128, 2)
    # embeddings 128,256 x 4,096 = 525,336,576, twice (lm_head untied) = 1,050,673,152;
    # a layer: q 4096^2 + k, v 4096 x 1024 each + o 4096^2 = 41,943,040, MLP 3 x 4096 x 14336
    # = 176,160,768, two norms 8,192: 218,112,000 x 32 = 6,979,584,000; + final norm 4,096
    # = 8,030,261,248: the published count.
    assert s.params == 8_030_261_248
    assert s.weight_bytes == 16_060_522_496  # x 2 bytes (bfloat16)
    assert "head_dim absent: hidden_size 4096 / 32 heads = 128" in s.derived


def test_llama3_70b_shape_and_published_parameter_count() -> None:
    s = shape_from_config(LLAMA3_70B)
    assert (s.layers, s.attention_heads, s.kv_heads, s.head_dim) == (80, 64, 8, 128)
    # layer: 2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672 + 2 x 8192 = 855,654,400;
    # x 80 = 68,452,352,000 + 2 x 128,256 x 8,192 = 2,101,346,304 + 8,192 = 70,553,706,496.
    assert s.params == 70_553_706_496


def test_mistral_7b_slides_on_every_layer() -> None:
    s = shape_from_config(MISTRAL_7B)
    assert (s.sliding_window, s.sliding_layers, s.full_layers) == (4096, 32, 0)
    # 218,112,000 x 32 + 2 x 32,000 x 4,096 + 4,096 = 7,241,732,096 (published 7.24 B)
    assert s.params == 7_241_732_096


def test_qwen25_7b_window_is_off_and_qkv_biases_count() -> None:
    s = shape_from_config(QWEN25_7B)
    assert (s.layers, s.kv_heads, s.head_dim) == (28, 4, 128)  # 3584 / 28 = 128
    assert (s.sliding_window, s.sliding_layers) == (None, 0)  # use_sliding_window false
    # layer: q 3584^2 = 12,845,056 (+3,584 bias), k, v 3584 x 512 = 1,835,008 each (+512 bias
    # each), o 12,845,056, MLP 3 x 3584 x 18944 = 203,685,888, norms 7,168: 233,057,792;
    # x 28 = 6,525,618,176 + 2 x 152,064 x 3,584 = 1,089,994,752 + 3,584 = 7,615,616,512.
    assert s.params == 7_615_616_512


def test_qwen25_14b_awq_weights_are_4_bit_but_kv_is_not() -> None:
    s = shape_from_config(QWEN25_14B_AWQ)
    assert s.quantization == "awq 4-bit" and s.dtype == "float16" and s.dtype_bytes == 2
    assert s.params == 14_770_033_664  # the published count
    # linear 48 x (2 x 5120^2 + 2 x 5120 x 1024 + 3 x 5120 x 13824) = 13,212,057,600 params:
    # x 0.5 B = 6,606,028,800 + (13,212,057,600 / 128 groups) x 2.5 B = 258,048,000;
    # the rest (embeddings, lm_head, norms, biases) 1,557,976,064 x 2 B = 3,115,952,128;
    # total 9,980,028,928 B: the 9.98 GB the AWQ checkpoint weighs.
    assert s.weight_bytes == 9_980_028_928


# --- the plans: hand-computed figures ------------------------------------------------------


def test_llama3_8b_on_an_h100() -> None:
    # NVML's total for an H100 80GB HBM3 is 81,559 MiB = 85,520,809,984 B.
    plan = plan_kv(inputs(shape_from_config(LLAMA3_8B), 81_559 * MIB))
    # KV/token = 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B (128 KiB)
    assert plan.bytes_per_token == 131_072
    # usable 85,520,809,984 x 0.9 = 76,968,728,985.6; pool = usable - 16,060,522,496 weights
    # - 1,073,741,824 reserve = 59,834,464,665.6; blocks = floor(pool / (16 x 131,072))
    # = floor(28,531.3) = 28,531; tokens 28,531 x 16 = 456,496.
    assert plan.pool_bytes == pytest.approx(59_834_464_665.6)
    assert (plan.blocks, plan.tokens) == (28_531, 456_496)
    # default traffic 512 + 128 = 640 tokens = 40 blocks: floor(28,531 / 40) = 713 sessions
    p50 = plan.session("p50")
    assert (p50.tokens, p50.blocks, p50.sessions) == (640, 40, 713)


def test_llama3_70b_gqa_fp8_on_an_h200() -> None:
    shape = shape_from_config(LLAMA3_70B)
    # H200: NVML total 143,771 MiB = 150,754,820,096 B; FP8 weights 72.7 GB; FP8 KV cache.
    plan = plan_kv(
        inputs(shape, 143_771 * MIB, weight_bytes=72.7e9, kv_cache_dtype="fp8"),
    )
    # GQA: 8 KV heads, not 64: KV/token = 2 x 80 x 8 x 128 x 1 B = 163,840 B (160 KiB)
    assert plan.bytes_per_token == 163_840
    # pool = 150,754,820,096 x 0.9 - 72,700,000,000 - 1,073,741,824 = 61,905,596,262.4;
    # blocks = floor(61,905,596,262.4 / (16 x 163,840 = 2,621,440)) = floor(23,615.4) = 23,615
    assert (plan.blocks, plan.tokens) == (23_615, 377_840)
    # the same pool with the bf16 KV (auto): 327,680 B/token -> floor(11,807.7) = 11,807 blocks
    bf16 = plan_kv(inputs(shape, 143_771 * MIB, weight_bytes=72.7e9))
    assert (bf16.bytes_per_token, bf16.blocks, bf16.tokens) == (327_680, 11_807, 188_912)


def test_mistral_7b_sliding_window_caps_what_a_long_session_holds() -> None:
    shape = shape_from_config(MISTRAL_7B)
    long_sessions = {"prompt_tokens": Dist("fixed", 6000), "output_tokens": Dist("fixed", 2000)}
    plan = plan_kv(inputs(shape, 24 * GIB, **long_sessions))
    # 24 GiB x 0.9 = 23,192,823,398.4 - 14,483,464,192 weights - 1 GiB = 7,635,617,382.4;
    # / 2,097,152 B per block = 3,640.9 -> 3,640 blocks = 58,240 tokens
    assert (plan.bytes_per_token, plan.blocks, plan.tokens) == (131_072, 3_640, 58_240)
    # a session of 8,000 tokens = 500 blocks, but a 4,096 window holds at most
    # ceil(4,095 / 16) + 1 = 257 blocks on each (sliding) layer: floor(3,640 / 257) = 14
    p50 = plan.session("p50")
    assert (p50.blocks, p50.sliding_blocks, p50.sessions) == (500, 257, 14)
    # without the window (vLLM V0, llama.cpp): floor(3,640 / 500) = 7
    assert "p50 sessions        14  (6,000 prompt + 2,000 output = 8,000 tokens, 500 blocks, " in (
        render_table(plan)
    )
    assert "257 on sliding layers)" in render_table(plan)
    kept = plan_kv(inputs(shape, 24 * GIB, sliding=False, **long_sessions))
    assert kept.session("p50").sessions == 7
    # sessions shorter than the window hold all of it either way: 640 tokens = 40 blocks
    short = plan_kv(inputs(shape, 24 * GIB))
    assert short.session("p50").sessions == 3_640 // 40 == 91


def test_a_hybrid_model_adds_full_and_sliding_layers_in_layer_blocks() -> None:
    # Gemma-2-like: every second layer slides (sliding_window_pattern 2 for model_type gemma2)
    cfg = {**MISTRAL_7B, "model_type": "gemma2"}
    shape = shape_from_config(cfg)
    assert (shape.sliding_layers, shape.full_layers) == (16, 16)
    plan = plan_kv(
        inputs(
            shape, 24 * GIB, prompt_tokens=Dist("fixed", 6000), output_tokens=Dist("fixed", 2000)
        )
    )
    # floor(3,640 blocks x 32 layers / (16 x 500 + 16 x 257)) = floor(116,480 / 12,112) = 9
    assert plan.session("p50").sessions == 9


def test_qwen25_7b_on_an_l40s() -> None:
    shape = shape_from_config(QWEN25_7B)
    # L40S: NVML total 46,068 MiB = 48,305,799,168 B
    plan = plan_kv(inputs(shape, 46_068 * MIB))
    # KV/token = 2 x 28 x 4 x 128 x 2 B = 57,344 B (56 KiB)
    assert plan.bytes_per_token == 57_344
    # 48,305,799,168 x 0.9 = 43,475,219,251.2 - 15,231,233,024 - 1,073,741,824
    # = 27,170,244,403.2; / (16 x 57,344 = 917,504) = 29,613.1 -> 29,613 blocks
    assert (plan.blocks, plan.tokens) == (29_613, 473_808)


def test_qwen25_14b_awq_on_a_4090_matches_the_profile() -> None:
    shape = shape_from_config(QWEN25_14B_AWQ)
    plan = plan_kv(inputs(shape, 24 * GIB))
    # KV/token = 2 x 48 x 8 x 128 x 2 B = 196,608 B (192 KiB; AWQ leaves the KV at float16)
    # 23,192,823,398.4 - 9,980,028,928 - 1,073,741,824 = 12,139,052,646.4
    # / (16 x 196,608 = 3,145,728) = 3,858.9 -> 3,858 blocks = 61,728 tokens
    assert (plan.bytes_per_token, plan.blocks, plan.tokens) == (196_608, 3_858, 61_728)
    # the simulator's profile of the same model and GPU holds the same pool
    assert get_profile("rtx4090-qwen2.5-14b-awq").kv_tokens == plan.tokens


WITH_CACHE_CONFIG = sorted(
    p.name for p in FIXTURES.glob("*.prom") if "vllm:cache_config_info{" in p.read_text()
)


def test_the_fixtures_with_a_cache_config_are_known() -> None:
    # a new fixture with cache_config_info needs its model's config here, and its own case
    assert WITH_CACHE_CONFIG == ["vllm-1.prom", "vllm-2.prom"]


@pytest.mark.parametrize("fixture", WITH_CACHE_CONFIG)
def test_the_vllm_fixture_kv_total_is_reproduced(fixture: str) -> None:
    # vllm-1.prom (and vllm-2.prom, built on it): facebook/opt-125m, block_size 16, cache_dtype
    # auto, num_gpu_blocks 7281, num_cpu_blocks 0, cpu_kvcache_space_bytes 4294967296: a
    # CPU-backend run, where vLLM sizes the pool as cpu_kvcache_space_bytes // block bytes and
    # reports it as GPU blocks. So: memory 4 GiB, utilization 1, no weights or reserve in it.
    text = fixture_text(fixture)
    assert 'model_name="facebook/opt-125m"' in text
    line = re.search(r"^vllm:cache_config_info\{(.*)\}", text, re.M)
    assert line is not None
    labels = dict(re.findall(r'(\w+)="([^"]*)"', line.group(1)))
    assert (labels["cache_dtype"], labels["num_cpu_blocks"]) == ("auto", "0")
    shape = shape_from_config(OPT_125M)
    # MHA: 12 KV heads (= attention heads); head_dim 768 / 12 = 64; KV/token
    # = 2 x 12 x 12 x 64 x 2 B = 36,864 B; floor(4,294,967,296 / (16 x 36,864)) = 7,281
    plan = plan_kv(
        inputs(
            shape,
            float(labels["cpu_kvcache_space_bytes"]),
            weight_bytes=0,
            reserve_bytes=0,
            gpu_memory_utilization=1.0,
            block_size=int(labels["block_size"]),
        )
    )
    assert plan.bytes_per_token == 36_864
    assert plan.blocks == int(labels["num_gpu_blocks"]) == 7_281
    assert plan.tokens == 7_281 * 16 == 116_496


def test_profiles_and_plan_kv_agree_for_every_profile() -> None:
    for name, profile in PROFILES.items():
        plan = plan_kv(inputs_from_profile(profile))
        assert (plan.blocks, plan.tokens) == (profile.num_blocks, profile.kv_tokens), name
    # rtx4090-llama3-8b-awq: 24 GiB x 0.9 - 5.7 GB - 1 GiB = 16,419,081,574.4 B
    # / 2,097,152 = 7,829.2 -> 7,829 blocks = 125,264 tokens
    plan = plan_kv(inputs_from_profile(get_profile("rtx4090-llama3-8b-awq")))
    assert (plan.blocks, plan.tokens) == (7_829, 125_264)


# --- traffic shapes --------------------------------------------------------------------------


def test_quantiles_of_the_load_distributions() -> None:
    assert dist_quantile(Dist("fixed", 512), 0.99) == 512
    # randint(128, 2048): 1,921 values; the median is the 961st = 1,088; p99 the 1,902nd = 2,029
    assert dist_quantile(Dist("uniform", 128, 2048), 0.5) == 1_088
    assert dist_quantile(Dist("uniform", 128, 2048), 0.99) == 2_029
    # lognormal of mean 800, sigma 0.6: median 800 x e^(-0.18) = 668.2; p99 x e^(0.6 x 2.3263)
    ln = Dist.parse("lognormal:mean=800,sigma=0.6", "--prompt-tokens")
    assert dist_quantile(ln, 0.5) == 668
    assert dist_quantile(ln, 0.99) == 2_698
    assert math.isclose(800 * math.exp(-0.18), 668.2, abs_tol=0.1)


def test_p50_and_p99_sessions_for_a_traffic_shape() -> None:
    shape = shape_from_config(LLAMA3_8B)
    plan = plan_kv(
        inputs(
            shape,
            81_559 * MIB,
            prompt_tokens=Dist.parse("lognormal:mean=800,sigma=0.6", "p"),
            output_tokens=Dist.parse("128:512", "o"),
        )
    )
    # p50: 668 + 320 = 988 tokens = ceil(988 / 16) = 62 blocks: floor(28,531 / 62) = 460
    # p99: 2,698 + 509 = 3,207 tokens = 201 blocks: floor(28,531 / 201) = 141
    p50, p99 = plan.session("p50"), plan.session("p99")
    assert (p50.prompt_tokens, p50.output_tokens, p50.blocks, p50.sessions) == (668, 320, 62, 460)
    assert (p99.prompt_tokens, p99.output_tokens, p99.blocks, p99.sessions) == (2698, 509, 201, 141)


# --- explanations, warnings, bad input -------------------------------------------------------


def test_explain_shows_each_step_with_its_numbers() -> None:
    text = render_explain(plan_kv(inputs(shape_from_config(LLAMA3_8B), 81_559 * MIB)))
    assert "2 (K and V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes = 131,072 B" in text
    assert "GPU 85,520,809,984 B (test) x gpu_memory_utilization 0.9 = 76,968,728,986 B" in text
    assert (
        "floor(59,834,464,666 B / (16 tokens x 131,072 B = 2,097,152 B per block)) = 28,531" in text
    )
    assert "28,531 blocks x 16 = 456,496" in text
    assert "floor(28,531 blocks / 40 blocks per session) = 713" in text
    table = render_table(plan_kv(inputs(shape_from_config(LLAMA3_8B), 81_559 * MIB)))
    assert re.search(r"KV tokens that fit\s+456,496", table)


def test_warnings_when_it_cannot_serve() -> None:
    shape = shape_from_config(LLAMA3_70B)
    plan = plan_kv(inputs(shape, 80 * GIB))  # 141 GB of bf16 weights on 80 GiB
    assert plan.blocks == 0 and plan.sessions == []
    assert any("nothing fits" in w for w in plan.warnings)
    tight = plan_kv(inputs(shape_from_config(LLAMA3_8B), 18 * GIB, max_model_len=8192))
    # 18 GiB x 0.9 = 17,394,617,548.8 - 16,060,522,496 - 1 GiB = 260,353,228.8 B
    # / 2,097,152 = 124.1 -> 124 blocks = 1,984 tokens
    assert tight.tokens == 1_984
    assert any("vLLM refuses to start" in w for w in tight.warnings)


@pytest.mark.parametrize(
    ("drop", "message"),
    [
        ("num_hidden_layers", "config.json: missing num_hidden_layers (the number of layers)"),
        ("num_attention_heads", "config.json: missing num_attention_heads"),
        ("hidden_size", "config.json: missing hidden_size (needed for head_dim"),
    ],
)
def test_a_missing_field_is_named(drop: str, message: str) -> None:
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != drop}
    with pytest.raises(ConfigError) as info:
        shape_from_config(cfg)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_bad_configs_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="torch_dtype 'int3'"):
        shape_from_config({**LLAMA3_8B, "torch_dtype": "int3"})
    with pytest.raises(ConfigError, match="num_key_value_heads must be a positive integer"):
        shape_from_config({**LLAMA3_8B, "num_key_value_heads": "8"})
    # Qwen3-Next-like: linear-attention layers hold a state per sequence, not KV per token
    hybrid = {**QWEN3_30B_A3B, "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    with pytest.raises(ConfigError, match=r"layer_types has linear_attention layers.*GPU KV"):
        shape_from_config({**hybrid, "num_hidden_layers": 4})
    with pytest.raises(ConfigError, match="missing qk_rope_head_dim"):
        shape_from_config({**LLAMA3_8B, "kv_lora_rank": 512})  # MLA without its RoPE width
    with pytest.raises(ConfigError, match="not a JSON object"):
        shape_from_config([1, 2])
    (tmp_path / "config.json").write_text("{nope")
    with pytest.raises(ConfigError, match="not JSON"):
        load_config(tmp_path)
    with pytest.raises(ConfigError, match="No such file"):
        load_config(tmp_path / "missing.json")
    with pytest.raises(PlanError, match="gpu-memory-utilization"):
        plan_kv(inputs(shape_from_config(LLAMA3_8B), GIB, gpu_memory_utilization=1.5))


def test_multimodal_text_config_and_defaults() -> None:
    cfg = {"architectures": ["X"], "text_config": {k: v for k, v in LLAMA3_8B.items()}}
    assert shape_from_config(cfg).kv_heads == 8
    mha = {k: v for k, v in LLAMA3_8B.items() if k not in ("num_key_value_heads", "torch_dtype")}
    s = shape_from_config(mha)
    # no torch_dtype: vLLM takes float32 and downcasts it (bfloat16 on this Ampere-or-later GPU)
    assert (s.kv_heads, s.config_dtype, s.dtype) == (32, None, "bfloat16")
    # 2 x 32 x 32 x 128 x 2 = 524,288 B: four times the GQA figure
    plan = plan_kv(inputs(s, 80 * GIB, weight_bytes=16e9))
    assert plan.bytes_per_token == 524_288


# --- vLLM's --dtype auto, tied embeddings, MoE and MLA --------------------------------------


def test_gemma2_9b_float32_runs_in_bfloat16_with_tied_embeddings() -> None:
    s = shape_from_config(GEMMA2_9B)
    # vLLM's auto downcasts a float32 checkpoint to the first 16-bit type the GPU has, and
    # strikes float16 for gemma2: bfloat16 on Ampere or later ...
    assert (s.config_dtype, s.dtype, s.dtype_bytes) == ("float32", "bfloat16", 2)
    assert "never float16 for gemma2" in s.dtype_why
    # ... and float32 kept before Ampere (no bfloat16, float16 refused)
    assert shape_from_config(GEMMA2_9B, bf16=False).dtype == "float32"
    # a Llama in float32 on a V100 runs in float16
    assert shape_from_config({**LLAMA3_8B, "torch_dtype": "float32"}, bf16=False).dtype == (
        "float16"
    )
    with pytest.raises(ConfigError, match="refuses it for gemma2"):
        shape_from_config(GEMMA2_9B, dtype="float16")
    assert shape_from_config(GEMMA2_9B, dtype="float32").dtype == "float32"
    # tied (Gemma2Config's default; the key is absent): embeddings 256,000 x 3,584 =
    # 917,504,000 once; a layer: q 3584 x 4096 + k, v 3584 x 2048 each + o 4096 x 3584 =
    # 44,040,192, MLP 3 x 3584 x 14336 = 154,140,672, four norms 14,336: 198,195,200 x 42 =
    # 8,324,198,400; + final norm 3,584 = 9,241,705,984: the published count (not 10.16 B)
    assert s.params == 9_241_705_984
    assert s.weight_bytes == 18_483_411_968  # x 2 bytes, not x 4
    assert (s.sliding_window, s.sliding_layers) == (4096, 21)


def test_gemma2_9b_kv_on_an_h100() -> None:
    plan = plan_kv(inputs(shape_from_config(GEMMA2_9B), 81_559 * MIB))
    # KV/token = 2 x 42 x 8 x 256 x 2 B = 344,064 B (336 KiB; float32 read it as 688,128)
    assert plan.bytes_per_token == 344_064
    # 85,520,809,984 x 0.9 = 76,968,728,985.6 - 18,483,411,968 - 1,073,741,824
    # = 57,411,575,193.6; / (16 x 344,064 = 5,505,024) = 10,428.9 -> 10,428 blocks
    assert (plan.blocks, plan.tokens) == (10_428, 166_848)
    # 8,000-token sessions: 500 blocks on the 21 full layers, 257 on the 21 sliding ones:
    # floor(10,428 x 42 / (21 x 500 + 21 x 257)) = floor(437,976 / 15,897) = 27
    long = plan_kv(
        inputs(
            shape_from_config(GEMMA2_9B),
            81_559 * MIB,
            prompt_tokens=Dist("fixed", 6000),
            output_tokens=Dist("fixed", 2000),
        )
    )
    assert long.session("p50").sessions == 27
    assert "dtype               bfloat16 (auto: torch_dtype float32 runs in bfloat16" in (
        render_table(plan)
    )


def test_deepseek_v2_lite_mla_and_experts() -> None:
    s = shape_from_config(DEEPSEEK_V2_LITE)
    assert s.mla and (s.kv_lora_rank, s.qk_rope_head_dim, s.kv_width) == (512, 64, 576)
    # attention (MLA, no q_lora_rank) a layer: q 2048 x 16 x (128 + 64) = 6,291,456,
    # kv_a 2048 x (512 + 64) = 1,179,648, kv_b 512 x 16 x (128 + 128) = 2,097,152,
    # o 16 x 128 x 2048 = 4,194,304: 13,762,560 x 27 = 371,589,120.
    # MLP: layer 0 dense 3 x 2048 x 10944 = 67,239,936; 26 MoE layers of 64 experts x
    # (3 x 2048 x 1408 + 2048 router) = 553,779,200 + 2 shared = 3 x 2048 x 2816 = 17,301,504:
    # 571,080,704 x 26 = 14,848,098,304. Embeddings 102,400 x 2048 x 2 (untied) = 419,430,400;
    # norms 27 x (2 x 2048 + 512 kv_a_layernorm) + 2048 = 126,464.
    # Total 15,706,484,224: the published 15.7 B.
    assert s.params == 15_706_484_224
    plan = plan_kv(inputs(s, 81_559 * MIB))
    # KV/token = (512 + 64) x 27 layers x 2 B = 31,104 B (not 2 x 27 x 16 x 128 x 2 = 221,184)
    assert plan.bytes_per_token == 31_104
    # 76,968,728,985.6 - 31,412,968,448 - 1,073,741,824 = 44,482,018,713.6;
    # / (16 x 31,104 = 497,664) = 89,381.9 -> 89,381 blocks = 1,430,096 tokens
    assert (plan.blocks, plan.tokens) == (89_381, 1_430_096)
    assert "27 layers x MLA latent 512 + rope 64" in render_table(plan)
    assert "(kv_lora_rank 512 + qk_rope_head_dim 64) (MLA latent) x 27 layers x 2 bytes" in (
        render_explain(plan)
    )
    # an fp8 cache halves it: 15,552 B
    assert plan_kv(inputs(s, 81_559 * MIB, kv_cache_dtype="fp8")).bytes_per_token == 15_552


def test_qwen3_30b_a3b_counts_every_expert() -> None:
    s = shape_from_config(QWEN3_30B_A3B)
    # attention a layer: q 2048 x 4096 = 8,388,608, k, v 2048 x 512 = 1,048,576 each,
    # o 8,388,608: 18,874,368; experts 128 x (3 x 2048 x 768 + 2048 router) = 604,241,920;
    # 623,116,288 x 48 = 29,909,581,824; embeddings 151,936 x 2048 x 2 = 622,329,856; norms
    # 48 x (2 x 2048 + q_norm, k_norm 2 x 128) + 2048 = 210,944: 30,532,122,624 (30.5 B)
    assert s.params == 30_532_122_624
    plan = plan_kv(inputs(s, 143_771 * MIB))
    # KV/token = 2 x 48 x 4 x 128 x 2 B = 98,304 B (96 KiB)
    assert plan.bytes_per_token == 98_304
    # H200: 150,754,820,096 x 0.9 = 135,679,338,086.4 - 61,064,245,248 - 1,073,741,824
    # = 73,541,351,014.4; / (16 x 98,304 = 1,572,864) = 46,756.3 -> 46,756 blocks
    assert (plan.blocks, plan.tokens) == (46_756, 748_096)
