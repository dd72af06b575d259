# SPDX-License-Identifier: MIT
"""A stand-in for Hugging Face transformers in the tracing tests (the real
one is not installed where CI runs): AutoConfig reads config.json, and
AutoModelForCausalLM builds a small causal LM from it (embedding, one
hidden x hidden layer, an untied output layer), the way the real Auto
classes build a model from a configuration with random weights."""
import json
import os
import types

import torch


class AutoConfig:
    @staticmethod
    def from_pretrained(path):
        with open(os.path.join(path, "config.json")) as f:
            return types.SimpleNamespace(**json.load(f))


class StandinForCausalLM(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        v, h = config.vocab_size, config.hidden_size
        self.embed = torch.nn.Embedding(v, h)
        self.layer = torch.nn.Linear(h, h)
        self.head = torch.nn.Linear(h, v, bias=False)

    def forward(self, input_ids, labels=None):
        logits = self.head(torch.relu(self.layer(self.embed(input_ids))))
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                                                     labels.view(-1))
        return types.SimpleNamespace(loss=loss, logits=logits)


class AutoModelForCausalLM:
    @staticmethod
    def from_config(config):
        if "StandinForCausalLM" not in (getattr(config, "architectures", None) or []):
            raise ValueError("unrecognized configuration")
        return StandinForCausalLM(config)


class AutoModelForMaskedLM:
    @staticmethod
    def from_config(config):
        raise ValueError("unrecognized configuration")
