# Copyright (c) dgx_spark.vllm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Generate the simulated cluster's tiny model without contacting any model hub.

A random LlamaForCausalLM (hidden 128, 2 attention heads, 1 KV head, head_dim 64 -- vLLM's CPU
attention rejects head_dim 16 --, 2 layers), a byte-level BPE tokenizer trained here on a small
built-in corpus, and a chat template. Seeded: the same inputs give the same files.
The ring's model (sim-tiny-ring) is the same with 12 attention and 12 KV heads, hidden 192, an MLP of
384 and a vocabulary of 768 (the trained 512 and reserved tokens, as large models carry), so that tensor
parallelism 3 and 4 divide its heads, its MLP and its vocabulary as vLLM pads it (to a multiple of 64). Its tokens
that decode to nothing alone never win a greedy step, so its first streamed token is text.

Usage: make_tiny_model.py OUTPUT_DIR [HEADS KV_HEADS HIDDEN INTERMEDIATE VOCAB]
"""

import json
import os
import sys

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|user|>", "<|assistant|>", "<|system|>",
           "<think>", "</think>", "<tool_call>", "</tool_call>"]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] | trim + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

CORPUS = """
The simulated cluster runs a real Docker daemon, a real Ray cluster and real vLLM on the CPU.
Two simulated nodes serve one tiny model tensor parallel across both of them.
Each node advertises one GPU to Ray, exactly as a DGX Spark does, and the driver runs in the head.
Memory, fabric addresses and GID indexes are facts read from each node before anything changes.
The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000. Punctuation: , . ; : ! ? ' " ( ) [ ] { } - _ / = + * & % $ # @
Hello, how are you today? I am fine, thank you. What is the capital of France? Paris is the capital.
A tool call names a function and its arguments; reasoning stays apart from the final answer.
"""


def main(out, heads=2, kv_heads=1, hidden=128, intermediate=256, vocab=None):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    os.makedirs(out, exist_ok=True)

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([line for line in CORPUS.splitlines() if line] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|begin_of_text|>",
                                   eos_token="<|end_of_text|>", pad_token="<|end_of_text|>")
    fast.chat_template = CHAT_TEMPLATE
    if vocab and len(fast) < vocab:  # reserved tokens, as large models carry: each decodes to text of its own
        fast.add_tokens(["<reserved_%d>" % index for index in range(vocab - len(fast))])
    fast.save_pretrained(out)

    config = LlamaConfig(
        vocab_size=len(fast), hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=64, max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False, torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    if vocab:  # greedy decoding (the smoke tests' temperature 0) must give text: a token that decodes to nothing alone
        # (a piece of a multi-byte character) gets a zero row in lm_head, so its logit is 0 and a random one wins
        silent = [i for i in range(len(fast)) if fast.decode([i]) in ("", " ") or "\ufffd" in fast.decode([i])]
        with torch.no_grad():
            model.lm_head.weight[silent] = 0
    # Sharded, with an index, as every large model is: the model role checks every shard the index names.
    model.save_pretrained(out, safe_serialization=True, max_shard_size="400KB")
    with open(os.path.join(out, "generation_config.json"), "w", encoding="utf-8") as handle:
        json.dump({"bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id, "do_sample": False}, handle)
    print(json.dumps({"path": out, "vocab_size": len(fast), "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 7):
        sys.exit(__doc__)
    main(sys.argv[1], *[int(a) for a in sys.argv[2:]])
