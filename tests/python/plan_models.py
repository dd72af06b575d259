# SPDX-License-Identifier: MIT
"""Small programs for the tracing tests of `vram plan --model`
(tests/python/test_plan.py, tests/cli/test_plan.sh): ordinary PyTorch code
for device "cuda", as a user writes it. The expected figures are derived by
hand in test_plan.py."""
import torch
from torch import nn

# The CNN: conv 3->8 (3x3, padding 1) on 4 images of 3x8x8, ReLU, a linear
# layer 512->10, cross-entropy, one SGD step (no momentum).
CNN_BATCH = 4


def cnn():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 8 * 8, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(CNN_BATCH, 3, 8, 8, device="cuda")
    y = torch.randint(0, 10, (CNN_BATCH,), device="cuda")
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()


# The transformer: a GPT-style decoder layer (pre-LayerNorm, single-head
# attention written out, GELU MLP 4x), token embedding, final LayerNorm and
# an untied output layer; AdamW (single-tensor), one step.
T_VOCAB, T_HIDDEN, T_BATCH, T_SEQ = 1000, 128, 2, 16


class Layer(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        att = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1)
        x = x + self.proj(att @ v)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab=T_VOCAB, h=T_HIDDEN):
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.layer = Layer(h)
        self.ln = nn.LayerNorm(h)
        self.head = nn.Linear(h, vocab, bias=False)

    def forward(self, ids):
        return self.head(self.ln(self.layer(self.emb(ids))))


def transformer():
    torch.manual_seed(0)
    model = TinyLM().to("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    ids = torch.randint(0, T_VOCAB, (T_BATCH, T_SEQ), device="cuda")
    logits = model(ids)
    loss = nn.functional.cross_entropy(logits.view(-1, T_VOCAB), ids.view(-1))
    loss.backward()
    opt.step()


def mixed_precision():
    """The CNN under bf16 autocast: needs the fake CUDA device."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Flatten(),
                          nn.Linear(512, 10)).cuda()
    x = torch.randn(4, 3, 8, 8, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(x).float().sum().backward()


def broken():
    raise ValueError("the user's own error")
