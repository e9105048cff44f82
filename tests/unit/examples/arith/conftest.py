"""The arith demo's tooling over its character tokenizer, shared by its tests."""

import pytest

from examples.arith.tokens import ALPHABET, ArithTokens
from examples.toy.tiny_llama import save_char_tokenizer


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    save_char_tokenizer(d, ALPHABET)
    return ArithTokens(d)
