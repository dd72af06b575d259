# SPDX-License-Identifier: MIT
"""corpus_workloads.py -- the workloads that bench/gpu/record_corpus.py
records, one function each.

A workload is a function of a Ctx (below) that builds its model from a
configuration with random weights, runs a few steps on random inputs and
returns what it ran (model, shapes, steps) as a dict for the trace's
metadata line. It calls ctx.mark("step N") at the start of each step, so
that the trace can be cut at a step boundary and `vram analyze` finds the
iterations. With ctx.tiny (the --cpu dry run) every dimension is small and
the device is the CPU; nothing is recorded then.

WORKLOADS lists them: name, family, framework ("torch" or "jax"), the GPU
memory it is expected to need at most (GiB, for the scheduler that runs
several at once) and the line that data/traces/README.md shows for it.
Only long-stable APIs are used (PyTorch 1.13 to 2.11, torchvision 0.14 to
0.26, transformers 4.35 to 5.x, peft, JAX 0.4 to 0.11), and where two
versions differ both ways are written.
"""
import contextlib
import math
import os
import random
import tempfile
import time


class Skip(Exception):
    """The workload cannot run here (a library missing, no CUDA): its
    message says why. Not a failure."""


def need(module, what=None):
    """Import MODULE or raise Skip naming it."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        raise Skip("%s not importable (%s)" % (what or module, e))


class Ctx:
    """What a workload is given: the framework, the device, the size, and
    the step marks it leaves (wall-clock microseconds, the clock of the
    trace's t_us column)."""

    def __init__(self, torch, tiny, cuda, enough=None):
        self.torch = torch
        self.tiny = tiny
        self.cuda = cuda
        self.dev = None if torch is None else torch.device("cuda" if cuda else "cpu")
        self.marks = []  # (t_us, label)
        self.rng = random.Random(1234)
        self._enough = enough

    def pick(self, full, tiny):
        return tiny if self.tiny else full

    def sync(self):
        if self.torch is not None and self.cuda:
            self.torch.cuda.synchronize()

    def mark(self, label):
        """A step boundary: the device drained, 1 ms of quiet either side,
        so that every event before it is older and every event after it
        newer than the mark even with a little clock skew."""
        self.sync()
        time.sleep(0.001)
        self.marks.append((time.time_ns() // 1000, label))
        time.sleep(0.001)

    def enough(self):
        """True once the recording holds as many events as a trace keeps
        (for loops of unbounded length: inference servers)."""
        return bool(self._enough and self._enough())

    def autocast(self, kind):
        """Mixed precision of KIND ("bf16", "fp16" or None). None on the
        CPU dry run (CPU autocast lacks kernels in older PyTorch)."""
        torch = self.torch
        if kind is None or not self.cuda:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype={"bf16": torch.bfloat16,
                                             "fp16": torch.float16}[kind])

    def scaler(self):
        """A GradScaler for fp16 training (disabled on the CPU)."""
        torch = self.torch
        amp = getattr(torch, "amp", None)
        if amp is not None and hasattr(amp, "GradScaler"):
            return amp.GradScaler("cuda", enabled=self.cuda)
        return torch.cuda.amp.GradScaler(enabled=self.cuda)

    def dtype(self, kind):
        """A whole model's dtype ("bf16", "fp16", "fp32"); fp32 on the CPU
        dry run, where half-precision kernels are missing in older PyTorch."""
        torch = self.torch
        if not self.cuda:
            return torch.float32
        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[kind]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def train_loop(ctx, model, opt, steps, micro, accum=1, amp=None, scaler=None):
    """STEPS optimizer steps of ACCUM micro-batches each; MICRO(step, j)
    returns the loss of micro-batch j (called under autocast AMP)."""
    for s in range(steps):
        ctx.mark("step %d" % (s + 1))
        for j in range(accum):
            with ctx.autocast(amp):
                loss = micro(s, j)
            loss = loss / accum
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            del loss
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
    ctx.mark("end")


# ---------------------------------------------------------------------------
# A hand-written decoder-only transformer (no dependency beyond PyTorch),
# used by the checkpointing, DDP, CUDA graph and paged-cache workloads.

def attention(torch, q, k, v, causal, mask=None):
    """softmax(q k^T / sqrt(d)) v over [B, H, T, D]; PyTorch's fused
    kernel where it exists (2.0 and later)."""
    F = torch.nn.functional
    if hasattr(F, "scaled_dot_product_attention"):
        if mask is not None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        t, u = q.shape[-2], k.shape[-2]
        s = s.masked_fill(torch.ones(t, u, dtype=torch.bool, device=q.device)
                          .triu(u - t + 1), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1) @ v


def make_lm(torch, vocab, d, layers, heads, seq, ckpt=None):
    """A GPT-like language model: token and position embeddings, LAYERS
    pre-norm blocks, a head tied to nothing. CKPT: None, "all" or "every2"
    (torch.utils.checkpoint around each block, or every other one)."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def qkv_of(self, x):
            b, t, _ = x.shape
            return self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)

        def rest(self, x, a):
            b, t, _ = x.shape
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

        def forward(self, x):
            q, k, v = self.qkv_of(x)
            return self.rest(x, attention(torch, q, k, v, True))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.lnf = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.ckpt = ckpt

        def forward(self, ids):
            t = ids.shape[1]
            x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
            for i, blk in enumerate(self.blocks):
                if self.training and (self.ckpt == "all" or (self.ckpt == "every2" and i % 2 == 0)):
                    import torch.utils.checkpoint as cp
                    x = cp.checkpoint(blk, x, use_reentrant=False)
                else:
                    x = blk(x)
            return self.head(self.lnf(x))

    return LM()


def lm_loss(torch, logits, ids):
    """Next-token cross entropy, in fp32 as language-model code does."""
    F = torch.nn.functional
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                           ids[:, 1:].reshape(-1))


# ---------------------------------------------------------------------------
# Hugging Face models built from configurations (random weights).

def hf_gpt2(ctx, n_layer, n_embd, n_head, n_pos=1024, vocab=50257):
    tr = need("transformers")
    if ctx.tiny:
        n_layer, n_embd, n_head, n_pos, vocab = 2, 64, 2, 128, 1000
    cfg = tr.GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_positions=n_pos,
                        vocab_size=vocab)
    cfg.use_cache = False
    return tr.GPT2LMHeadModel(cfg), cfg, "GPT2(layers=%d,d=%d,heads=%d)" % (n_layer, n_embd, n_head)


def hf_llama(ctx, layers, d, inter, heads, kv_heads, vocab=32000, max_pos=4096):
    tr = need("transformers")
    if ctx.tiny:
        layers, d, inter, heads, kv_heads, vocab, max_pos = 2, 64, 128, 4, 2, 1000, 256
    cfg = tr.LlamaConfig(vocab_size=vocab, hidden_size=d, intermediate_size=inter,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv_heads, max_position_embeddings=max_pos)
    cfg.use_cache = False
    cfg.pad_token_id = 0
    return (tr.LlamaForCausalLM(cfg), cfg,
            "Llama(layers=%d,d=%d,ffn=%d,heads=%d,kv=%d)" % (layers, d, inter, heads, kv_heads))


def enable_hf_checkpointing(model):
    try:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    except TypeError:  # transformers before 4.35
        model.gradient_checkpointing_enable()


def lm_accum(ctx, arch, mb, accum, seq, steps, precision):
    """Causal-LM fine-tuning with gradient accumulation: MB sequences of SEQ
    tokens per micro-batch, ACCUM micro-batches per AdamW step. PRECISION:
    "autocast-bf16" (fp32 weights) or "bf16" (the whole model in bf16)."""
    torch = ctx.torch
    if arch == "gpt2":
        model, cfg, desc = hf_gpt2(ctx, 12, 768, 12)
    else:
        model, cfg, desc = hf_llama(ctx, 8, 1024, 2816, 16, 4)
    if ctx.tiny:
        mb, seq, steps, accum = min(mb, 2), 32, 2, min(accum, 2)
    amp = "bf16"
    if precision == "bf16":
        model = model.to(ctx.dtype("bf16"))
        amp = None
    model = model.to(ctx.dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = cfg.vocab_size

    def micro(s, j):
        ids = torch.randint(0, vocab, (mb, seq), device=ctx.dev)
        return model(input_ids=ids, labels=ids).loss

    train_loop(ctx, model, opt, steps, micro, accum=accum, amp=amp)
    return {"model": desc, "params": n_params(model), "micro_batch": mb, "seq": seq,
            "accum": accum, "steps": steps, "precision": precision, "optimizer": "AdamW"}


def w_gpt2_accum(mb, accum):
    return lambda ctx: lm_accum(ctx, "gpt2", mb, accum, 1024, 3, "autocast-bf16")


def w_llama_accum(mb, accum, seq):
    return lambda ctx: lm_accum(ctx, "llama", mb, accum, seq, 3, "bf16")


def w_lora_llama(ctx):
    """LoRA (peft) on a Llama-like model whose frozen base is bf16."""
    torch = ctx.torch
    peft = need("peft")
    model, cfg, desc = hf_llama(ctx, 12, 2048, 5632, 16, 8)
    model = model.to(ctx.dtype("bf16")).to(ctx.dev)
    lcfg = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, task_type="CAUSAL_LM",
                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = peft.get_peft_model(model, lcfg).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=2e-4)
    mb, seq, accum, steps = ctx.pick((4, 512, 2, 4), (2, 32, 2, 2))

    def micro(s, j):
        ids = torch.randint(0, cfg.vocab_size, (mb, seq), device=ctx.dev)
        return model(input_ids=ids, labels=ids).loss

    train_loop(ctx, model, opt, steps, micro, accum=accum, amp="bf16")
    return {"model": desc + "+LoRA(r=16,qkvo)", "params": n_params(model),
            "trainable": sum(p.numel() for p in trainable), "micro_batch": mb, "seq": seq,
            "accum": accum, "steps": steps, "precision": "bf16-base,autocast-bf16"}


def w_lora_gpt2m_ckpt(ctx):
    """LoRA on GPT-2 medium with HF gradient checkpointing (the usual
    memory-saving fine-tuning recipe)."""
    torch = ctx.torch
    peft = need("peft")
    model, cfg, desc = hf_gpt2(ctx, 24, 1024, 16)
    model = model.to(ctx.dev)
    enable_hf_checkpointing(model)
    lcfg = peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, task_type="CAUSAL_LM",
                           target_modules=["c_attn", "c_proj"], fan_in_fan_out=True)
    model = peft.get_peft_model(model, lcfg).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=2e-4)
    mb, seq, accum, steps = ctx.pick((8, 1024, 2, 4), (2, 32, 2, 2))

    def micro(s, j):
        ids = torch.randint(0, cfg.vocab_size, (mb, seq), device=ctx.dev)
        return model(input_ids=ids, labels=ids).loss

    train_loop(ctx, model, opt, steps, micro, accum=accum, amp="bf16")
    return {"model": desc + "+LoRA(r=8,c_attn,c_proj)+grad-ckpt", "params": n_params(model),
            "trainable": sum(p.numel() for p in trainable), "micro_batch": mb, "seq": seq,
            "accum": accum, "steps": steps, "precision": "autocast-bf16"}


def w_ckpt_gpt2m(ctx):
    """GPT-2 medium, full fine-tuning with HF gradient checkpointing."""
    torch = ctx.torch
    model, cfg, desc = hf_gpt2(ctx, 24, 1024, 16)
    model = model.to(ctx.dev).train()
    enable_hf_checkpointing(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    b, seq, steps = ctx.pick((8, 1024, 4), (2, 32, 2))

    def micro(s, j):
        ids = torch.randint(0, cfg.vocab_size, (b, seq), device=ctx.dev)
        return model(input_ids=ids, labels=ids).loss

    train_loop(ctx, model, opt, steps, micro, amp="bf16")
    return {"model": desc + "+grad-ckpt", "params": n_params(model), "batch": b, "seq": seq,
            "steps": steps, "precision": "autocast-bf16", "optimizer": "AdamW"}


def w_ckpt_blocks(ctx):
    """A hand-written 16-block transformer with torch.utils.checkpoint
    around every other block (selective checkpointing)."""
    torch = ctx.torch
    vocab, d, layers, heads, seq, b, steps = ctx.pick((32000, 1024, 16, 16, 1024, 8, 4),
                                                      (500, 32, 2, 2, 32, 2, 2))
    model = make_lm(torch, vocab, d, layers, heads, seq, ckpt="every2").to(ctx.dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def micro(s, j):
        ids = torch.randint(0, vocab, (b, seq), device=ctx.dev)
        return lm_loss(torch, model(ids), ids)

    train_loop(ctx, model, opt, steps, micro, amp="bf16")
    return {"model": "LM(layers=%d,d=%d,heads=%d)+checkpoint-every-2nd" % (layers, d, heads),
            "params": n_params(model), "batch": b, "seq": seq, "steps": steps,
            "precision": "autocast-bf16", "optimizer": "AdamW"}


def w_bert_varlen(ctx):
    """BERT-base masked-LM training with dynamic padding: each batch padded
    to its longest sequence (64 to 512 tokens, a multiple of 8)."""
    torch = ctx.torch
    tr = need("transformers")
    if ctx.tiny:
        cfg = tr.BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=128)
    else:
        cfg = tr.BertConfig()
    model = tr.BertForMaskedLM(cfg).to(ctx.dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    b, lo, hi, steps = ctx.pick((32, 64, 512, 8), (2, 8, 32, 3))
    lens = []

    def micro(s, j):
        rows = [ctx.rng.randint(lo, hi) for _ in range(b)]
        t = -(-max(rows) // 8) * 8
        lens.append(t)
        ids = torch.randint(5, cfg.vocab_size, (b, t), device=ctx.dev)
        mask = (torch.arange(t, device=ctx.dev)[None, :]
                < torch.tensor(rows, device=ctx.dev)[:, None]).long()
        labels = ids.masked_fill((torch.rand(b, t, device=ctx.dev) > 0.15) | (mask == 0), -100)
        return model(input_ids=ids, attention_mask=mask, labels=labels).loss

    train_loop(ctx, model, opt, steps, micro, amp="bf16")
    return {"model": "BERT-base-MLM(layers=%d,d=%d)" % (cfg.num_hidden_layers, cfg.hidden_size),
            "params": n_params(model), "batch": b, "seq_lens": lens, "steps": steps,
            "precision": "autocast-bf16"}


# ---------------------------------------------------------------------------
# Inference servers.

def requests_loop(ctx, n_max, make_req, serve):
    """Serve requests until N_MAX or until the recording is full."""
    done = []
    for r in range(n_max):
        ctx.mark("request %d" % (r + 1))
        req = make_req(r)
        serve(req)
        done.append(req)
        if ctx.enough():
            break
    ctx.mark("end")
    return done


def hf_generate(ctx, model, vocab, n_max, sample):
    """HF generate() with a KV cache on requests of varying batch, prompt
    length and new tokens; left padding with an attention mask, as a batch
    of prompts of different lengths is served."""
    torch = ctx.torch
    model.generation_config.eos_token_id = None  # exactly the new tokens asked
    model.generation_config.pad_token_id = 0
    batches, prompts, news = ctx.pick(([1, 2, 4, 8, 16], (16, 384), (16, 96)),
                                      ([1, 2], (4, 16), (2, 6)))

    def make_req(r):
        b = ctx.rng.choice(batches)
        lens = [ctx.rng.randint(*prompts) for _ in range(b)]
        return {"batch": b, "lens": lens, "new": ctx.rng.randint(*news)}

    def serve(req):
        t = max(req["lens"])
        ids = torch.randint(1, vocab, (req["batch"], t), device=ctx.dev)
        mask = (torch.arange(t, device=ctx.dev)[None, :]
                >= (t - torch.tensor(req["lens"], device=ctx.dev))[:, None]).long()
        ids = ids * mask  # pad id 0 on the left
        kw = dict(attention_mask=mask, max_new_tokens=req["new"], min_new_tokens=req["new"],
                  pad_token_id=0, use_cache=True)
        if sample:
            kw.update(do_sample=True, top_k=50, temperature=0.8)
        else:
            kw.update(do_sample=False)
        with torch.no_grad():
            out = model.generate(ids, **kw)
        del out

    done = requests_loop(ctx, n_max, make_req, serve)
    return done


def w_gpt2_generate(ctx):
    model, cfg, desc = hf_gpt2(ctx, 12, 768, 12)
    model = model.to(ctx.dtype("fp16")).to(ctx.dev).eval()
    model.config.use_cache = True
    done = hf_generate(ctx, model, cfg.vocab_size, ctx.pick(40, 3), sample=False)
    return {"model": desc + "-fp16", "requests": len(done),
            "batches": [d["batch"] for d in done],
            "prompt_max": [max(d["lens"]) for d in done], "new_tokens": [d["new"] for d in done],
            "decoding": "greedy,DynamicCache,left-padded"}


def w_llama_generate(ctx):
    model, cfg, desc = hf_llama(ctx, 8, 1024, 2816, 16, 4)
    model = model.to(ctx.dtype("bf16")).to(ctx.dev).eval()
    model.config.use_cache = True
    done = hf_generate(ctx, model, cfg.vocab_size, ctx.pick(40, 3), sample=True)
    return {"model": desc + "-bf16", "requests": len(done),
            "batches": [d["batch"] for d in done],
            "prompt_max": [max(d["lens"]) for d in done], "new_tokens": [d["new"] for d in done],
            "decoding": "top-k-sampling,DynamicCache,left-padded"}


def w_paged_server(ctx):
    """A continuous-batching server over a paged KV cache, written by
    hand: one pool of 16-token blocks per layer allocated at start, block
    tables per request, requests arriving and finishing at random, each
    prompt prefilled alone, the running batch decoded one token a step with
    its keys and values gathered through the block tables."""
    torch = ctx.torch
    vocab, d, layers, heads, bs, n_blocks, max_batch, steps = ctx.pick(
        (32000, 1024, 6, 16, 16, 4096, 48, 600), (500, 32, 2, 2, 4, 64, 4, 12))
    prompt_rng, new_rng = ctx.pick(((16, 512), (16, 160)), ((2, 8), (2, 5)))
    hd = d // heads
    dt = ctx.dtype("fp16")
    model = make_lm(torch, vocab, d, layers, heads, 8192).to(dt).to(ctx.dev).eval()
    pool_k = [torch.zeros(n_blocks, heads, bs, hd, dtype=dt, device=ctx.dev) for _ in range(layers)]
    pool_v = [torch.zeros(n_blocks, heads, bs, hd, dtype=dt, device=ctx.dev) for _ in range(layers)]
    free = list(range(n_blocks))
    active, served, batch_sizes = [], 0, []

    def write_kv(layer, req, k, v, start):
        # k, v: [heads, n, hd] for positions start .. start+n-1
        n = k.shape[1]
        pos = list(range(start, start + n))
        blk = torch.tensor([req["table"][p // bs] for p in pos], device=ctx.dev)
        off = torch.tensor([p % bs for p in pos], device=ctx.dev)
        pool_k[layer][blk, :, off] = k.transpose(0, 1)
        pool_v[layer][blk, :, off] = v.transpose(0, 1)

    def prefill(req):
        ids = torch.randint(1, vocab, (1, req["len"]), device=ctx.dev)
        x = model.tok(ids) + model.pos(torch.arange(req["len"], device=ctx.dev))
        for li, blk in enumerate(model.blocks):
            q, k, v = blk.qkv_of(x)
            write_kv(li, req, k[0], v[0], 0)
            x = blk.rest(x, attention(torch, q, k, v, True))
        req["next"] = model.head(model.lnf(x[:, -1])).argmax(-1)

    def decode(batch):
        b = len(batch)
        lens = [r["len"] for r in batch]
        nmax = -(-max(lens) // bs)
        table = torch.tensor([r["table"][:nmax] + [0] * (nmax - len(r["table"][:nmax]))
                              for r in batch], device=ctx.dev)
        ids = torch.cat([r["next"] for r in batch]).view(b, 1)
        pos = torch.tensor([n - 1 for n in lens], device=ctx.dev)
        valid = (torch.arange(nmax * bs, device=ctx.dev)[None, :]
                 < torch.tensor(lens, device=ctx.dev)[:, None]).view(b, 1, 1, nmax * bs)
        x = model.tok(ids) + model.pos(pos).view(b, 1, d)
        blk_of = torch.tensor([r["table"][(n - 1) // bs] for r, n in zip(batch, lens)],
                              device=ctx.dev)
        off_of = torch.tensor([(n - 1) % bs for n in lens], device=ctx.dev)
        for li, blk in enumerate(model.blocks):
            q, k, v = blk.qkv_of(x)  # [b, heads, 1, hd]
            pool_k[li][blk_of, :, off_of] = k[:, :, 0]
            pool_v[li][blk_of, :, off_of] = v[:, :, 0]
            kk = pool_k[li][table].permute(0, 2, 1, 3, 4).reshape(b, heads, nmax * bs, hd)
            vv = pool_v[li][table].permute(0, 2, 1, 3, 4).reshape(b, heads, nmax * bs, hd)
            x = blk.rest(x, attention(torch, q, kk, vv, False, mask=valid))
        nxt = model.head(model.lnf(x[:, -1])).argmax(-1)
        for i, r in enumerate(batch):
            r["next"] = nxt[i:i + 1]

    with torch.no_grad():
        for step in range(steps):
            ctx.mark("step %d" % (step + 1))
            # Arrivals: up to two new requests a step while blocks remain.
            for _ in range(2):
                if len(active) >= max_batch or ctx.rng.random() < 0.5:
                    break
                plen, new = ctx.rng.randint(*prompt_rng), ctx.rng.randint(*new_rng)
                need_blocks = -(-(plen + new) // bs)
                if need_blocks > len(free):
                    break
                req = {"len": plen, "new": new, "made": 0,
                       "table": [free.pop() for _ in range(need_blocks)]}
                prefill(req)
                active.append(req)
            if active:
                for r in active:
                    r["len"] += 1
                    r["made"] += 1
                decode(active)
                batch_sizes.append(len(active))
            for r in [r for r in active if r["made"] >= r["new"]]:
                active.remove(r)
                free.extend(r["table"])
                served += 1
            if ctx.enough():
                break
        ctx.mark("end")
    return {"model": "LM(layers=%d,d=%d,heads=%d)-fp16" % (layers, d, heads),
            "kv_pool": "%dx%d-token-blocks" % (n_blocks, bs), "steps": step + 1,
            "served": served, "max_batch_seen": max(batch_sizes or [0]),
            "prompt": "%d-%d" % prompt_rng, "new_tokens": "%d-%d" % new_rng}


# ---------------------------------------------------------------------------
# Diffusion, written by hand.

def make_unet(torch, ch, mults, attn_levels, in_ch=4):
    nn, F = torch.nn, torch.nn.functional

    class Res(nn.Module):
        def __init__(self, cin, cout, temb):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(min(32, cin), cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.t = nn.Linear(temb, cout)
            self.n2, self.c2 = nn.GroupNorm(min(32, cout), cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.c1(F.silu(self.n1(x))) + self.t(t)[:, :, None, None]
            return self.skip(x) + self.c2(F.silu(self.n2(h)))

    class Attn(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.n, self.qkv, self.o = nn.GroupNorm(min(32, c), c), nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)
            self.heads = max(1, c // 64)

        def forward(self, x):
            b, c, h, w = x.shape
            q, k, v = self.qkv(self.n(x)).view(b, 3, self.heads, c // self.heads, h * w) \
                .permute(1, 0, 2, 4, 3)
            a = attention(torch, q, k, v, False)  # [b, heads, hw, c/heads]
            return x + self.o(a.permute(0, 1, 3, 2).reshape(b, c, h, w))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            temb = ch * 4
            self.temb = nn.Sequential(nn.Linear(ch, temb), nn.SiLU(), nn.Linear(temb, temb))
            self.inp = nn.Conv2d(in_ch, ch, 3, padding=1)
            self.down, self.up = nn.ModuleList(), nn.ModuleList()
            chans, c = [ch], ch
            for i, m in enumerate(mults):
                for _ in range(2):
                    self.down.append(nn.ModuleList([Res(c, ch * m, temb),
                                                    Attn(ch * m) if i in attn_levels else nn.Identity()]))
                    c = ch * m
                    chans.append(c)
                if i < len(mults) - 1:
                    self.down.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                    chans.append(c)
            self.mid = nn.ModuleList([Res(c, c, temb), Attn(c), Res(c, c, temb)])
            for i, m in reversed(list(enumerate(mults))):
                for _ in range(3):
                    self.up.append(nn.ModuleList([Res(c + chans.pop(), ch * m, temb),
                                                  Attn(ch * m) if i in attn_levels else nn.Identity()]))
                    c = ch * m
                if i > 0:
                    self.up.append(nn.Upsample(scale_factor=2, mode="nearest"))
            self.out = nn.Sequential(nn.GroupNorm(min(32, c), c), nn.SiLU(), nn.Conv2d(c, in_ch, 3, padding=1))
            self.ch = ch

        def forward(self, x, t):
            half = self.ch // 2
            f = torch.exp(-math.log(10000) * torch.arange(half, device=x.device) / half)
            e = t.float()[:, None] * f[None]
            t = self.temb(torch.cat([e.sin(), e.cos()], 1))
            h = self.inp(x)
            hs = [h]
            for m in self.down:
                if isinstance(m, nn.ModuleList):
                    h = m[1](m[0](h, t))
                else:
                    h = m(h)
                hs.append(h)
            h = self.mid[2](self.mid[1](self.mid[0](h, t)), t)
            for m in self.up:
                if isinstance(m, nn.ModuleList):
                    h = m[1](m[0](torch.cat([h, hs.pop()], 1), t))
                else:
                    h = m(h)
            return self.out(h)

    return UNet()


def make_dit(torch, size, patch, d, layers, heads, classes=1000, in_ch=4):
    """A DiT: patchified latents, transformer blocks with adaLN-Zero
    modulation from the timestep and class embeddings."""
    nn, F = torch.nn, torch.nn.functional
    n = (size // patch) ** 2

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1 = nn.LayerNorm(d, elementwise_affine=False)
            self.n2 = nn.LayerNorm(d, elementwise_affine=False)
            self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.ada = nn.Linear(d, 6 * d)

        def forward(self, x, c):
            s1, b1, g1, s2, b2, g2 = self.ada(F.silu(c))[:, None].chunk(6, -1)
            h = self.n1(x) * (1 + s1) + b1
            bsz, t, _ = h.shape
            q, k, v = self.qkv(h).view(bsz, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            x = x + g1 * self.o(attention(torch, q, k, v, False).transpose(1, 2).reshape(bsz, t, d))
            h = self.n2(x) * (1 + s2) + b2
            return x + g2 * self.fc2(F.gelu(self.fc1(h)))

    class DiT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Conv2d(in_ch, d, patch, stride=patch)
            self.pos = nn.Parameter(torch.zeros(1, n, d))
            self.t = nn.Sequential(nn.Linear(256, d), nn.SiLU(), nn.Linear(d, d))
            self.y = nn.Embedding(classes + 1, d)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.nf = nn.LayerNorm(d, elementwise_affine=False)
            self.out = nn.Linear(d, patch * patch * in_ch)

        def forward(self, x, t, y):
            b = x.shape[0]
            h = self.emb(x).flatten(2).transpose(1, 2) + self.pos
            f = torch.exp(-math.log(10000) * torch.arange(128, device=x.device) / 128)
            e = t.float()[:, None] * f[None]
            c = self.t(torch.cat([e.sin(), e.cos()], 1)) + self.y(y)
            for blk in self.blocks:
                h = blk(h, c)
            h = self.out(self.nf(h))  # [b, n, p*p*in_ch]
            g = size // patch
            h = h.view(b, g, g, patch, patch, in_ch).permute(0, 5, 1, 3, 2, 4)
            return h.reshape(b, in_ch, size, size)

    return DiT()


def w_unet_bf16(ctx):
    torch = ctx.torch
    F = torch.nn.functional
    ch, b, size, steps = ctx.pick((128, 32, 64, 6), (32, 2, 16, 2))
    model = make_unet(torch, ch, (1, 2, 4), (1, 2)).to(ctx.dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def micro(s, j):
        x0 = torch.randn(b, 4, size, size, device=ctx.dev)
        noise = torch.randn_like(x0)
        t = torch.randint(0, 1000, (b,), device=ctx.dev)
        a = (1 - t.float() / 1000)[:, None, None, None]
        return F.mse_loss(model(a.sqrt() * x0 + (1 - a).sqrt() * noise, t).float(), noise)

    train_loop(ctx, model, opt, steps, micro, amp="bf16")
    return {"model": "UNet(ch=%d,mults=1-2-4,attn@1/2,1/4)" % ch, "params": n_params(model),
            "batch": b, "latent": "4x%dx%d" % (size, size), "steps": steps,
            "precision": "autocast-bf16", "optimizer": "AdamW"}


def w_dit_fp16(ctx):
    torch = ctx.torch
    F = torch.nn.functional
    size, patch, d, layers, heads, b, steps = ctx.pick((32, 2, 768, 12, 12, 64, 6),
                                                       (8, 2, 32, 2, 2, 2, 2))
    model = make_dit(torch, size, patch, d, layers, heads).to(ctx.dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = ctx.scaler()

    def micro(s, j):
        x0 = torch.randn(b, 4, size, size, device=ctx.dev)
        noise = torch.randn_like(x0)
        t = torch.randint(0, 1000, (b,), device=ctx.dev)
        y = torch.randint(0, 1001, (b,), device=ctx.dev)
        a = (1 - t.float() / 1000)[:, None, None, None]
        return F.mse_loss(model(a.sqrt() * x0 + (1 - a).sqrt() * noise, t, y).float(), noise)

    train_loop(ctx, model, opt, steps, micro, amp="fp16", scaler=scaler)
    return {"model": "DiT(d=%d,layers=%d,patch=%d)" % (d, layers, patch),
            "params": n_params(model), "batch": b, "latent": "4x%dx%d" % (size, size),
            "steps": steps, "precision": "autocast-fp16+GradScaler", "optimizer": "AdamW"}


def w_dit_sample(ctx):
    """DiT sampling: a DDIM-like loop with classifier-free guidance (the
    batch doubled: conditional and unconditional), fp16 weights."""
    torch = ctx.torch
    size, patch, d, layers, heads, b, n_steps = ctx.pick((32, 2, 768, 12, 12, 16, 25),
                                                         (8, 2, 32, 2, 2, 2, 3))
    model = make_dit(torch, size, patch, d, layers, heads).to(ctx.dtype("fp16")).to(ctx.dev).eval()
    rounds = ctx.pick(3, 1)
    with torch.no_grad():
        for r in range(rounds):
            x = torch.randn(b, 4, size, size, device=ctx.dev, dtype=ctx.dtype("fp16"))
            y = torch.randint(0, 1000, (b,), device=ctx.dev)
            for i in range(n_steps):
                ctx.mark("round %d step %d" % (r + 1, i + 1))
                t = torch.full((2 * b,), 1000 - i * (1000 // n_steps), device=ctx.dev)
                out = model(torch.cat([x, x]), t, torch.cat([y, torch.full_like(y, 1000)]))
                cond, unc = out.chunk(2)
                eps = unc + 4.0 * (cond - unc)
                x = x - eps * (1.0 / n_steps)
    ctx.mark("end")
    return {"model": "DiT(d=%d,layers=%d,patch=%d)-fp16" % (d, layers, patch),
            "batch": "%dx2(cfg)" % b, "sampling_steps": n_steps, "rounds": rounds}


# ---------------------------------------------------------------------------
# Vision (torchvision, random weights).

def vision_train(ctx, build, tiny_build, desc, b, size, steps, amp, scaler):
    torch = ctx.torch
    tv = need("torchvision")
    model = (tiny_build(tv) if ctx.tiny else build(tv)).to(ctx.dev).train()
    b, size, steps = ctx.pick((b, size, steps), (2, 32, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sc = ctx.scaler() if scaler else None
    F = torch.nn.functional

    def micro(s, j):
        x = torch.randn(b, 3, size, size, device=ctx.dev)
        y = torch.randint(0, 1000 if not ctx.tiny else 10, (b,), device=ctx.dev)
        return F.cross_entropy(model(x), y)

    train_loop(ctx, model, opt, steps, micro, amp=amp, scaler=sc)
    return {"model": desc, "params": n_params(model), "batch": b, "image": "3x%dx%d" % (size, size),
            "steps": steps, "precision": "autocast-" + amp + ("+GradScaler" if scaler else ""),
            "optimizer": "AdamW"}


def w_vit_bf16(ctx):
    return vision_train(
        ctx, lambda tv: tv.models.vit_b_16(weights=None),
        lambda tv: tv.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                               num_heads=2, hidden_dim=32, mlp_dim=64,
                                               num_classes=10),
        "torchvision.vit_b_16", 64, 224, 6, "bf16", False)


def w_convnext_fp16(ctx):
    return vision_train(
        ctx, lambda tv: tv.models.convnext_tiny(weights=None),
        lambda tv: tv.models.convnext_tiny(weights=None, num_classes=10),
        "torchvision.convnext_tiny", 64, 224, 6, "fp16", True)


def w_swin_bf16(ctx):
    return vision_train(
        ctx, lambda tv: tv.models.swin_t(weights=None),
        lambda tv: tv.models.swin_t(weights=None, num_classes=10),
        "torchvision.swin_t", 48, 224, 5, "bf16", False)


# ---------------------------------------------------------------------------
# Detection and segmentation with variable image sizes.

def det_targets(ctx, n, h, w, masks):
    torch = ctx.torch
    out = []
    for _ in range(n):
        k = ctx.rng.randint(1, 8)
        x1 = torch.rand(k, device=ctx.dev) * (w * 0.7)
        y1 = torch.rand(k, device=ctx.dev) * (h * 0.7)
        bw = torch.rand(k, device=ctx.dev) * (w * 0.3) + 8
        bh = torch.rand(k, device=ctx.dev) * (h * 0.3) + 8
        t = {"boxes": torch.stack([x1, y1, (x1 + bw).clamp(max=w - 1), (y1 + bh).clamp(max=h - 1)], 1),
             "labels": torch.randint(1, 91, (k,), device=ctx.dev)}
        if masks:
            t["masks"] = (torch.rand(k, h, w, device=ctx.dev) > 0.5).to(torch.uint8)
        out.append(t)
    return out


def detection(ctx, builder, desc, b, steps, masks, amp):
    torch = ctx.torch
    tv = need("torchvision")
    import torchvision.models.detection as det
    sizes = ctx.pick((480, 544, 608, 672, 736, 800), (64,))
    kw = {}
    if ctx.tiny and builder != "retinanet_resnet50_fpn":  # few proposals on the CPU
        kw = dict(rpn_pre_nms_top_n_train=64, rpn_post_nms_top_n_train=32,
                  box_batch_size_per_image=16)
    model = getattr(det, builder)(weights=None, weights_backbone=None, num_classes=91,
                                  min_size=sizes, max_size=ctx.pick(1333, 96), **kw)
    model = model.to(ctx.dev).train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
    sc = ctx.scaler() if amp == "fp16" else None
    b, steps = ctx.pick((b, steps), (2, 2))
    lo, hi = ctx.pick((400, 900), (48, 96))
    shapes = []

    def micro(s, j):
        imgs = []
        for _ in range(b):
            h, w = ctx.rng.randint(lo, hi), ctx.rng.randint(lo, hi)
            shapes.append("%dx%d" % (h, w))
            imgs.append(torch.rand(3, h, w, device=ctx.dev))
        targets = [det_targets(ctx, 1, im.shape[1], im.shape[2], masks)[0] for im in imgs]
        losses = model(imgs, targets)
        return sum(losses.values())

    train_loop(ctx, model, opt, steps, micro, amp=amp, scaler=sc)
    del tv
    return {"model": "torchvision." + builder + desc, "params": n_params(model), "batch": b,
            "steps": steps, "image_sizes": shapes, "min_size": sizes,
            "precision": "fp32" if amp is None else "autocast-" + amp + "+GradScaler",
            "optimizer": "SGD(momentum)"}


def w_fasterrcnn(ctx):
    return detection(ctx, "fasterrcnn_resnet50_fpn", "", 4, 5, False, None)


def w_maskrcnn(ctx):
    return detection(ctx, "maskrcnn_resnet50_fpn", "", 4, 4, True, "fp16")


def w_retinanet(ctx):
    return detection(ctx, "retinanet_resnet50_fpn", "", 4, 4, False, None)


def w_deeplab(ctx):
    torch = ctx.torch
    need("torchvision")
    import torchvision.models.segmentation as seg
    model = seg.deeplabv3_resnet50(weights=None, weights_backbone=None, num_classes=21,
                                   aux_loss=True).to(ctx.dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    b, steps = ctx.pick((8, 5), (2, 2))
    sizes = ctx.pick([320, 384, 448, 512], [32, 48])
    F = torch.nn.functional
    shapes = []

    def micro(s, j):
        h, w = ctx.rng.choice(sizes), ctx.rng.choice(sizes)
        shapes.append("%dx%d" % (h, w))
        x = torch.randn(b, 3, h, w, device=ctx.dev)
        y = torch.randint(0, 21, (b, h, w), device=ctx.dev)
        y[:, :4] = 255
        out = model(x)
        return (F.cross_entropy(out["out"].float(), y, ignore_index=255)
                + 0.5 * F.cross_entropy(out["aux"].float(), y, ignore_index=255))

    train_loop(ctx, model, opt, steps, micro, amp="bf16")
    return {"model": "torchvision.deeplabv3_resnet50(aux)", "params": n_params(model),
            "batch": b, "steps": steps, "crops": shapes, "precision": "autocast-bf16",
            "optimizer": "SGD(momentum)"}


# ---------------------------------------------------------------------------
# Data parallel gradient buckets.

def w_ddp_real(ctx):
    """torch.nn.parallel.DistributedDataParallel with one rank (NCCL, gloo
    where NCCL cannot start): the reducer's flat buckets of 25 MiB filled
    as backward proceeds, all-reduced and copied back."""
    torch = ctx.torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    vocab, d, layers, heads, seq, b, steps = ctx.pick((32000, 768, 12, 12, 512, 8, 5),
                                                      (500, 32, 2, 2, 16, 2, 2))
    model = make_lm(torch, vocab, d, layers, heads, seq).to(ctx.dev).train()
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    fd, store = tempfile.mkstemp(prefix="vram-corpus-ddp-")
    os.close(fd)
    os.unlink(store)
    backend, ddp, why = None, None, []
    try:
        # NCCL may start its communicator lazily: DDP's first broadcast
        # is where it fails, so that is inside the try too.
        for be in (["nccl", "gloo"] if ctx.cuda else ["gloo"]):
            try:
                if os.path.exists(store):
                    os.unlink(store)
                dist.init_process_group(be, init_method="file://" + store, rank=0, world_size=1)
                backend = be
                ddp = DDP(model, device_ids=[0] if ctx.cuda else None, bucket_cap_mb=25)
                break
            except Exception as e:  # try the next backend
                why.append("%s: %s" % (be, str(e).splitlines()[0][:150] if str(e) else type(e)))
                if backend is not None:
                    dist.destroy_process_group()
                backend = None
        if ddp is None:
            raise Skip("no process group could start (%s)" % "; ".join(why))
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)

        def micro(s, j):
            ids = torch.randint(0, vocab, (b, seq), device=ctx.dev)
            return lm_loss(torch, ddp(ids), ids)

        train_loop(ctx, ddp, opt, steps, micro, amp="bf16")
    finally:
        if backend is not None:
            dist.destroy_process_group()
        if os.path.exists(store):
            os.unlink(store)
    return {"model": "LM(layers=%d,d=%d,heads=%d)" % (layers, d, heads),
            "params": n_params(model), "batch": b, "seq": seq, "steps": steps,
            "ddp": "world=1,backend=%s,bucket_cap_mb=25" % backend, "precision": "autocast-bf16",
            "backend_failures": why}


def w_ddp_buckets(ctx):
    """The reducer's pattern written out in one process: parameters in
    reverse order grouped into 25 MiB buckets; as backward makes each
    gradient ready (a post-accumulate hook), its bucket is filled, and when
    full a flat bucket is allocated on a communication stream, the
    gradients copied in, reduced (scaled in place, where an all-reduce
    would run), copied back and the bucket freed there (record_stream)."""
    torch = ctx.torch
    vocab, d, layers, heads, seq, b, steps = ctx.pick((32000, 1024, 12, 16, 512, 8, 5),
                                                      (500, 32, 2, 2, 16, 2, 2))
    model = make_lm(torch, vocab, d, layers, heads, seq).to(ctx.dev).train()
    cap = ctx.pick(25 << 20, 64 << 10)
    params = [p for p in model.parameters() if p.requires_grad][::-1]
    buckets, cur, size = [], [], 0
    for p in params:
        nbytes = p.numel() * p.element_size()
        if cur and size + nbytes > cap:
            buckets.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += nbytes
    if cur:
        buckets.append(cur)
    where = {id(p): i for i, bk in enumerate(buckets) for p in bk}
    pending = [set() for _ in buckets]
    comm = torch.cuda.Stream() if ctx.cuda else None

    def reduce_bucket(i):
        bk = buckets[i]
        flat = torch.cat([p.grad.reshape(-1) for p in bk])  # on the compute stream
        if comm is not None:
            comm.wait_stream(torch.cuda.current_stream())
            ctxm = torch.cuda.stream(comm)
        else:
            ctxm = contextlib.nullcontext()
        with ctxm:
            flat.mul_(1.0)  # where the all-reduce runs (world size 1)
            off = 0
            for p in bk:
                n = p.numel()
                p.grad.copy_(flat[off:off + n].view_as(p.grad))
                off += n
        if comm is not None:  # freed on the compute stream, used on comm
            flat.record_stream(comm)
            for p in bk:
                p.grad.record_stream(comm)
        del flat

    def ready(p):
        i = where[id(p)]
        pending[i].add(id(p))
        if len(pending[i]) == len(buckets[i]):
            pending[i].clear()
            reduce_bucket(i)

    # PyTorch 2.1 and later: a hook once a parameter's gradient is
    # accumulated, as the reducer's; before, every bucket after backward.
    legacy = not hasattr(params[0], "register_post_accumulate_grad_hook")
    hooks = [] if legacy else [p.register_post_accumulate_grad_hook(ready) for p in params]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def micro(s, j):
        ids = torch.randint(0, vocab, (b, seq), device=ctx.dev)
        return lm_loss(torch, model(ids), ids)

    for s in range(steps):
        ctx.mark("step %d" % (s + 1))
        with ctx.autocast("bf16"):
            loss = micro(s, 0)
        loss.backward()
        del loss
        if legacy:  # no post-accumulate hook: reduce after backward
            for i in range(len(buckets)):
                reduce_bucket(i)
        if comm is not None:
            torch.cuda.current_stream().wait_stream(comm)
        opt.step()
        opt.zero_grad(set_to_none=True)
    ctx.mark("end")
    for h in hooks:
        h.remove()
    return {"model": "LM(layers=%d,d=%d,heads=%d)" % (layers, d, heads),
            "params": n_params(model), "batch": b, "seq": seq, "steps": steps,
            "buckets": len(buckets), "bucket_cap": cap, "precision": "autocast-bf16",
            "comm": "side-stream" if comm is not None else "none"}


# ---------------------------------------------------------------------------
# CUDA graphs (CUDA only).

def need_cuda(ctx):
    if not ctx.cuda:
        raise Skip("CUDA graphs need a GPU")


def w_graph_callables(ctx):
    """torch.cuda.make_graphed_callables on two MLP halves (their forward
    and backward captured, each in a private pool), the loss and the
    optimizer outside the graphs."""
    need_cuda(ctx)
    torch = ctx.torch
    nn, F = torch.nn, torch.nn.functional
    d, b, steps = 4096, 512, 10
    m1 = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU()).to(ctx.dev)
    m2 = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1000)).to(ctx.dev)
    opt = torch.optim.SGD(list(m1.parameters()) + list(m2.parameters()), lr=0.01, momentum=0.9)
    x0 = torch.randn(b, d, device=ctx.dev)
    h0 = torch.randn(b, d, device=ctx.dev, requires_grad=True)
    g1, g2 = torch.cuda.make_graphed_callables((m1, m2), ((x0,), (h0,)))
    for s in range(steps):
        ctx.mark("step %d" % (s + 1))
        x = torch.randn(b, d, device=ctx.dev)
        y = torch.randint(0, 1000, (b,), device=ctx.dev)
        loss = F.cross_entropy(g2(g1(x)), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
    ctx.mark("end")
    return {"model": "MLP(%d)x5 as 2 graphed callables" % d, "batch": b, "steps": steps,
            "optimizer": "SGD(momentum)"}


def w_graph_whole_step(ctx):
    """A whole training step captured in one CUDA graph (forward, backward
    and optimizer step, the private pool holding every intermediate), after
    a warm-up on a side stream, then replayed with new data copied in. The
    inputs are embeddings already (an embedding's backward is left out of
    the capture), the targets token ids."""
    need_cuda(ctx)
    torch = ctx.torch
    F = torch.nn.functional
    vocab, d, layers, heads, seq, b, replays = 8192, 512, 6, 8, 256, 16, 12
    model = make_lm(torch, vocab, d, layers, heads, seq).to(ctx.dev).train()
    params = [p for n, p in model.named_parameters() if not n.startswith(("tok.", "pos."))]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    static_x = torch.randn(b, seq, d, device=ctx.dev)
    static_y = torch.randint(0, vocab, (b, seq), device=ctx.dev)

    def loss_of():
        x = static_x
        for blk in model.blocks:
            x = blk(x)
        logits = model.head(model.lnf(x))
        return F.cross_entropy(logits.reshape(-1, vocab), static_y.reshape(-1))

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    ctx.mark("warmup")
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss = loss_of()
            loss.backward()
            opt.step()
            del loss
    torch.cuda.current_stream().wait_stream(side)
    ctx.mark("capture")
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_of()
        static_loss.backward()
        opt.step()
    for s in range(replays):
        ctx.mark("step %d" % (s + 1))
        static_x.copy_(torch.randn(b, seq, d, device=ctx.dev))
        static_y.copy_(torch.randint(0, vocab, (b, seq), device=ctx.dev))
        g.replay()
        float(static_loss)
    ctx.mark("end")
    return {"model": "LM-blocks(layers=%d,d=%d,heads=%d)" % (layers, d, heads),
            "params": sum(p.numel() for p in params), "batch": b, "seq": seq,
            "replays": replays, "graph": "whole-step(fwd+bwd+SGD)", "precision": "fp32"}


def w_graph_buckets(ctx):
    """An inference server's CUDA graphs: the forward captured once per
    batch-size bucket (largest first, all sharing one memory pool, as
    serving engines capture them), then requests of random batch replayed
    through the smallest bucket that holds them."""
    need_cuda(ctx)
    torch = ctx.torch
    vocab, d, layers, heads, seq = 32000, 1024, 8, 16, 256
    buckets = [64, 32, 16, 8, 4, 2, 1]
    dt = torch.float16
    model = make_lm(torch, vocab, d, layers, heads, seq).to(dt).to(ctx.dev).eval()
    pool = torch.cuda.graph_pool_handle()
    graphs = {}
    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            ctx.mark("warmup")
            for _ in range(2):
                model(torch.randint(0, vocab, (buckets[0], seq), device=ctx.dev))
        torch.cuda.current_stream().wait_stream(side)
        for bb in buckets:
            ctx.mark("capture %d" % bb)
            ids = torch.zeros(bb, seq, dtype=torch.long, device=ctx.dev)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                out = model(ids)[:, -1].argmax(-1)
            graphs[bb] = (g, ids, out)
        served = []
        for r in range(60):
            ctx.mark("request %d" % (r + 1))
            n = ctx.rng.randint(1, buckets[0])
            bb = min(k for k in buckets if k >= n)
            g, ids, out = graphs[bb]
            ids[:n].copy_(torch.randint(0, vocab, (n, seq), device=ctx.dev))
            g.replay()
            res = out[:n].clone()
            served.append(n)
            del res
    ctx.mark("end")
    return {"model": "LM(layers=%d,d=%d,heads=%d)-fp16" % (layers, d, heads), "seq": seq,
            "buckets": buckets, "requests": len(served), "graph": "per-bucket,shared-pool"}


# ---------------------------------------------------------------------------
# JAX (recorded by `vram record` under XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async).

def jax_adam(jax, jnp):
    def init(params):
        z = jax.tree_util.tree_map(jnp.zeros_like, params)
        return z, jax.tree_util.tree_map(jnp.zeros_like, params)

    def update(params, grads, m, v, t, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
        m = jax.tree_util.tree_map(lambda a, g: b1 * a + (1 - b1) * g, m, grads)
        v = jax.tree_util.tree_map(lambda a, g: b2 * a + (1 - b2) * g * g, v, grads)
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        params = jax.tree_util.tree_map(
            lambda p, a, b: p - lr * (a / c1) / (jnp.sqrt(b / c2) + eps), params, m, v)
        return params, m, v

    return init, update


def w_jax_lm(ctx):
    """A GPT-like LM in plain JAX, trained with Adam in one jitted step
    (parameters and optimizer state donated)."""
    jax = need("jax")
    import jax.numpy as jnp
    V, D, L, H, T, B, steps = ctx.pick((8192, 512, 6, 8, 256, 16, 8), (256, 32, 2, 2, 16, 2, 2))
    key = jax.random.PRNGKey(0)
    keys = iter(jax.random.split(key, 4 + 4 * L))

    def w(shape):
        return jax.random.normal(next(keys), shape) * 0.02

    params = {"tok": w((V, D)), "pos": w((T, D)), "head": w((D, V)),
              "blocks": [{"qkv": w((D, 3 * D)), "o": w((D, D)), "fc1": w((D, 4 * D)),
                          "fc2": w((4 * D, D))} for _ in range(L)]}

    def ln(x):
        m = x.mean(-1, keepdims=True)
        return (x - m) / jnp.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)

    def loss_fn(p, ids):
        x = p["tok"][ids] + p["pos"][None, :ids.shape[1]]
        t = ids.shape[1]
        causal = jnp.tril(jnp.ones((t, t), dtype=bool))
        for blk in p["blocks"]:
            q, k, v = jnp.split(ln(x) @ blk["qkv"], 3, -1)
            sh = lambda a: a.reshape(a.shape[0], t, H, D // H).transpose(0, 2, 1, 3)
            q, k, v = sh(q), sh(k), sh(v)
            s = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / math.sqrt(D // H), -1e9)
            a = (jax.nn.softmax(s, -1) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
            x = x + a @ blk["o"]
            x = x + jax.nn.gelu(ln(x) @ blk["fc1"]) @ blk["fc2"]
        logits = ln(x) @ p["head"]
        lp = jax.nn.log_softmax(logits[:, :-1], -1)
        return -jnp.take_along_axis(lp, ids[:, 1:, None], -1).mean()

    init, update = jax_adam(jax, jnp)
    m, v = init(params)

    def step(p, m, v, t, ids):
        loss, g = jax.value_and_grad(loss_fn)(p, ids)
        p, m, v = update(p, g, m, v, t)
        return p, m, v, loss

    step = jax.jit(step, donate_argnums=(0, 1, 2))
    rng = jax.random.PRNGKey(1)
    for s in range(steps):
        ctx.mark("step %d" % (s + 1))
        rng, k = jax.random.split(rng)
        ids = jax.random.randint(k, (B, T), 0, V)
        params, m, v, loss = step(params, m, v, float(s + 1), ids)
        loss.block_until_ready()
    ctx.mark("end")
    return {"model": "jax-LM(layers=%d,d=%d,heads=%d,vocab=%d)" % (L, D, H, V), "batch": B,
            "seq": T, "steps": steps, "optimizer": "Adam(donated)", "jax": jax.__version__}


def w_jax_varlen(ctx):
    """A JAX MLP classifier whose batches come in four padded buckets (one
    compilation each), plus an evaluation pass of another shape every few
    steps: the arrays change size from step to step."""
    jax = need("jax")
    import jax.numpy as jnp
    D, Hd, C, steps = ctx.pick((1024, 4096, 1000, 16), (16, 32, 10, 4))
    buckets = ctx.pick([64, 128, 256, 512], [2, 4])
    keys = jax.random.split(jax.random.PRNGKey(0), 8)
    params = {"w1": jax.random.normal(keys[0], (D, Hd)) * 0.02,
              "w2": jax.random.normal(keys[1], (Hd, Hd)) * 0.02,
              "w3": jax.random.normal(keys[2], (Hd, C)) * 0.02}

    def fwd(p, x):
        return jax.nn.relu(jax.nn.relu(x @ p["w1"]) @ p["w2"]) @ p["w3"]

    def loss_fn(p, x, y):
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(fwd(p, x)), y[:, None], -1))

    init, update = jax_adam(jax, jnp)
    m, v = init(params)

    @jax.jit
    def step(p, m, v, t, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        p, m, v = update(p, g, m, v, t)
        return p, m, v, loss

    evaluate = jax.jit(lambda p, x: jnp.argmax(fwd(p, x), -1))
    rng = jax.random.PRNGKey(2)
    seen = []
    for s in range(steps):
        ctx.mark("step %d" % (s + 1))
        b = ctx.rng.choice(buckets)
        seen.append(b)
        rng, kx, ky = jax.random.split(rng, 3)
        x = jax.random.normal(kx, (b, D))
        y = jax.random.randint(ky, (b,), 0, C)
        params, m, v, loss = step(params, m, v, float(s + 1), x, y)
        loss.block_until_ready()
        if s % 4 == 3:
            evaluate(params, jax.random.normal(kx, (buckets[-1] * 2, D))).block_until_ready()
    ctx.mark("end")
    return {"model": "jax-MLP(%d-%d-%d-%d)" % (D, Hd, Hd, C), "batches": seen, "steps": steps,
            "optimizer": "Adam", "jax": jax.__version__}


# ---------------------------------------------------------------------------
# The list. est_gb: the most GPU memory it should need (for the scheduler).

def _W(name, family, fn, est_gb, what, framework="torch"):
    return {"name": name, "family": family, "fn": fn, "est_gb": est_gb, "what": what,
            "framework": framework}


WORKLOADS = [
    _W("gpt2_accum_mb1", "llm-grad-accum", w_gpt2_accum(1, 8), 6,
       "HF GPT-2 small (124M) from GPT2Config, micro-batch 1 x 1024 tokens, 8 micro-batches "
       "per AdamW step, bf16 autocast, 3 steps"),
    _W("gpt2_accum_mb4", "llm-grad-accum", w_gpt2_accum(4, 4), 10,
       "the same, micro-batch 4, 4 micro-batches per step, 3 steps"),
    _W("gpt2_accum_mb8", "llm-grad-accum", w_gpt2_accum(8, 2), 16,
       "the same, micro-batch 8, 2 micro-batches per step, 3 steps"),
    _W("llama_accum_mb1", "llm-grad-accum", w_llama_accum(1, 8, 2048), 6,
       "HF Llama-like (8 layers, d 1024, ffn 2816, 16 heads, 4 KV heads, vocab 32000) "
       "all in bf16, micro-batch 1 x 2048 tokens, 8 micro-batches per AdamW step, 3 steps"),
    _W("llama_accum_mb2", "llm-grad-accum", w_llama_accum(2, 4, 1024), 6,
       "the same, micro-batch 2 x 1024 tokens, 4 micro-batches per step, 3 steps"),
    _W("lora_llama", "lora", w_lora_llama, 10,
       "peft LoRA r=16 on q,k,v,o of a bf16 Llama-like (12 layers, d 2048, ffn 5632, 16 "
       "heads, 8 KV heads), micro-batch 4 x 512, 2 micro-batches per step, bf16 autocast, 4 steps"),
    _W("lora_gpt2m_ckpt", "lora", w_lora_gpt2m_ckpt, 10,
       "peft LoRA r=8 on c_attn,c_proj of HF GPT-2 medium (355M) with gradient "
       "checkpointing, micro-batch 8 x 1024, 2 micro-batches per step, bf16 autocast, 4 steps"),
    _W("ckpt_gpt2m", "checkpointing", w_ckpt_gpt2m, 14,
       "HF GPT-2 medium full fine-tuning, gradient_checkpointing_enable (non-reentrant), "
       "batch 8 x 1024, bf16 autocast, AdamW, 4 steps"),
    _W("ckpt_blocks", "checkpointing", w_ckpt_blocks, 14,
       "hand-written 16-block transformer (d 1024, vocab 32000) with torch.utils.checkpoint "
       "around every other block, batch 8 x 1024, bf16 autocast, AdamW, 4 steps"),
    _W("bert_mlm_varlen", "nlp-varlen", w_bert_varlen, 12,
       "HF BERT-base masked LM, batch 32, each batch padded to its longest row (64-512 "
       "tokens, multiple of 8), bf16 autocast, AdamW, 8 steps"),
    _W("gpt2_generate", "inference", w_gpt2_generate, 4,
       "HF GPT-2 small fp16 generate() (greedy, KV cache), requests of batch 1-16, "
       "left-padded prompts 16-384, 16-96 new tokens, until the trace is full"),
    _W("llama_generate", "inference", w_llama_generate, 4,
       "HF Llama-like (8 layers, d 1024) bf16 generate() with top-k sampling, the same "
       "request mix, until the trace is full"),
    _W("paged_server", "inference", w_paged_server, 6,
       "hand-written continuous-batching server: 6-layer d-1024 fp16 decoder, paged KV "
       "cache of 4096 16-token blocks, up to 48 requests, prompts 16-512, 16-160 new "
       "tokens, prefill alone, batched decode gathering K/V by block table"),
    _W("unet_bf16", "diffusion", w_unet_bf16, 14,
       "hand-written UNet (channels 128/256/512, attention at 1/2 and 1/4), 4x64x64 "
       "latents, batch 32, noise-prediction MSE, bf16 autocast, AdamW, 6 steps"),
    _W("dit_fp16", "diffusion", w_dit_fp16, 12,
       "hand-written DiT-B/2 (d 768, 12 blocks, adaLN-Zero), 4x32x32 latents, batch 64, "
       "fp16 autocast with GradScaler, AdamW, 6 steps"),
    _W("dit_sample", "diffusion", w_dit_sample, 3,
       "the same DiT in fp16 sampling 3 rounds of 25 steps, batch 16 doubled for "
       "classifier-free guidance"),
    _W("vit_b16_bf16", "vision", w_vit_bf16, 14,
       "torchvision vit_b_16, batch 64 x 224x224, bf16 autocast, AdamW, 6 steps"),
    _W("convnext_tiny_fp16", "vision", w_convnext_fp16, 14,
       "torchvision convnext_tiny, batch 64 x 224x224, fp16 autocast with GradScaler, "
       "AdamW, 6 steps"),
    _W("swin_t_bf16", "vision", w_swin_bf16, 14,
       "torchvision swin_t, batch 48 x 224x224, bf16 autocast, AdamW, 5 steps"),
    _W("fasterrcnn_varsize", "detection", w_fasterrcnn, 10,
       "torchvision fasterrcnn_resnet50_fpn, batch 4 images of random 400-900 x 400-900, "
       "multi-scale min_size 480-800, fp32, SGD, 5 steps"),
    _W("maskrcnn_varsize", "detection", w_maskrcnn, 12,
       "torchvision maskrcnn_resnet50_fpn, the same images with masks, fp16 autocast with "
       "GradScaler, SGD, 4 steps"),
    _W("retinanet_varsize", "detection", w_retinanet, 10,
       "torchvision retinanet_resnet50_fpn, the same images, fp32, SGD, 4 steps"),
    _W("deeplabv3_varsize", "segmentation", w_deeplab, 14,
       "torchvision deeplabv3_resnet50 with aux head, batch 8 crops of 320-512 x 320-512 "
       "(random per step), bf16 autocast, SGD, 5 steps"),
    _W("ddp_nccl", "ddp-buckets", w_ddp_real, 10,
       "DistributedDataParallel, one rank (NCCL, else gloo), bucket_cap_mb 25, 12-block "
       "d-768 LM, batch 8 x 512, bf16 autocast, AdamW, 5 steps"),
    _W("ddp_buckets_manual", "ddp-buckets", w_ddp_buckets, 12,
       "the reducer's pattern by hand: 25 MiB flat buckets allocated on a side stream as "
       "backward makes gradients ready, copied in and out, freed by record_stream; "
       "12-block d-1024 LM, batch 8 x 512, bf16 autocast, AdamW, 5 steps"),
    _W("graph_callables", "cuda-graphs", w_graph_callables, 4,
       "torch.cuda.make_graphed_callables on two MLP halves (d 4096, batch 512), loss "
       "and SGD outside the graphs, 10 steps"),
    _W("graph_whole_step", "cuda-graphs", w_graph_whole_step, 6,
       "a whole training step (6-block d-512 LM, batch 16 x 256, SGD) captured in one "
       "CUDA graph after a side-stream warm-up, replayed 12 times"),
    _W("graph_buckets", "cuda-graphs", w_graph_buckets, 8,
       "fp16 8-block d-1024 LM forward captured per batch bucket 64..1 sharing one graph "
       "pool, then 60 requests of random batch replayed"),
    _W("jax_lm", "jax-xla", w_jax_lm, 6,
       "plain-JAX GPT-like LM (6 layers, d 512, vocab 8192), batch 16 x 256, Adam in one "
       "jitted step with donated state, 8 steps; recorded by vram record under "
       "XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async", framework="jax"),
    _W("jax_varlen", "jax-xla", w_jax_varlen, 4,
       "plain-JAX MLP (1024-4096-4096-1000), batches of 64/128/256/512 (one compilation "
       "each) and an evaluation pass every 4 steps, Adam, 16 steps; vram record under "
       "cuda_async", framework="jax"),
]
