"""A small Qwen3-Next configuration for tests that compare the course's Gated DeltaNet layer
with transformers' Qwen3NextGatedDeltaNet (test_deltanet, test_contract)."""


def small_qwen3_next_config(hidden, key_heads, value_heads, d_k, d_v, conv):
    """transformers.Qwen3NextConfig with one linear-attention layer of these sizes, and
    everything else (attention, experts, vocabulary) as small as the config allows."""
    import transformers

    return transformers.Qwen3NextConfig(
        hidden_size=hidden,
        linear_num_key_heads=key_heads,
        linear_num_value_heads=value_heads,
        linear_key_head_dim=d_k,
        linear_value_head_dim=d_v,
        linear_conv_kernel_dim=conv,
        num_hidden_layers=1,
        layer_types=["linear_attention"],
        vocab_size=10,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=4,
        intermediate_size=8,
        num_experts=2,
        num_experts_per_tok=1,
        moe_intermediate_size=8,
        shared_expert_intermediate_size=8,
    )
