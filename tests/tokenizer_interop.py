"""moet's byte-level BPE tokenizer against Hugging Face `tokenizers` (PyPI), token for token, on a
varied corpus made here (accented Latin, CJK, Cyrillic, Arabic, emoji with ZWJ sequences, digit
and whitespace runs, tabs, CRLF, trailing spaces, special tokens inside text, contractions in both
cases, unusual Unicode spaces), for:
  (a) a tokenizer `moet tokenizer train` wrote (also loaded by transformers'
      PreTrainedTokenizerFast);
  (b) one `tokenizers` trains with its BpeTrainer and ByteLevel (GPT-2 style), and a variant with
      a prefix space, added tokens (lstrip/rstrip/single_word/normalized) and a BOS/EOS template;
  (c) Llama-3 style (Split with Llama 3's regex, ByteLevel without its regex, ignore_merges),
      DeepSeek-V3 style (a Sequence of three Splits, then ByteLevel) and Qwen 2 style (NFC, its
      Split, ByteLevel), trained by `tokenizers`;
  (d) Split behaviours (Removed, MergedWithPrevious/Next, Contiguous, invert) and Digits.
Decoding is compared too (round trips and random id sequences, partial UTF-8 included), and
invalid UTF-8 input is checked to encode as its U+FFFD replacement (docs/tokenizer.md).

Usage: tokenizer_interop.py --moet MOET --workdir DIR
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

FRAGMENTS = [
    "Café naïve résumé Ångström façade Straße œuvre São Paulo Øre",
    "我们今天去北京。東京は日本の首都です。ひらがなカタカナ 한국어 텍스트",
    "Привет, как дела? Ёжик в тумане. ПРИВЕТ",
    "مرحبا بالعالم، كيف حالك؟ ١٢٣",
    "family 👩‍👩‍👧‍👦 thumbs 👍🏽 flag 🇫🇷 heart ❤️‍🔥 coder 🧑🏿‍💻",
    "12345678901234 3.14159 2024-01-01 1,000,000 ²³ ½ ٣٤٥ ⅷ",
    "a    b", "  leading", "trailing   ", "\t\ttabs\there\t", "line1\r\nline2\r\n\r\nline3",
    "\n\n\nx", "x\n \n", "x \n", "  \n  ", " ", "\t", "\r\n",
    "it's don't we're I've I'm we'll he'd IT'S DON'T WE'RE I'VE I'M WE'LL HE'D 's 'S",
    "<|endoftext|>", "a<|endoftext|>b", " <|pad|> ", "<|endoftext|><|endoftext|>", "<|endof",
    "nbsp\u00a0thin\u2009ideo\u3000nel\u0085zw\u200bbom\ufeffls\u2028ps\u2029",
    "def f(x):\n    return x**2  # comment\n",
    "e\u0301 a\u0308 Z\u0351\u036b\u0343\u036a\u0302A", "ﬁ ﬀ Ⅻ ㎏",
    "hello world, hello World! hello-world_hello.world", "ing sing ing-ing [MASK]x [MASK]",
    "http://example.com/a?b=c&d=e #hashtag @user", "$100 €50 ¥30 +-*/=<>^~|\\",
]


def make_corpus(rng, n):
    texts = list(FRAGMENTS)
    seps = [" ", "", "\n", "  ", "\t", "\r\n", " \n ", "<|endoftext|>"]
    while len(texts) < n:
        k = rng.randint(1, 5)
        parts = [rng.choice(FRAGMENTS) for _ in range(k)]
        texts.append("".join(p + rng.choice(seps) for p in parts))
    return texts


def training_text(rng):
    parts = []
    root = "/usr/share/games/fortunes"
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            p = os.path.join(root, name)
            if "." in name or not os.path.isfile(p):
                continue
            with open(p, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
            if sum(map(len, parts)) > 600_000:
                break
    parts += [rng.choice(FRAGMENTS) + " " for _ in range(3000)]
    return "\n".join(parts)


class Moet:
    def __init__(self, binary, workdir):
        self.binary, self.workdir = binary, workdir

    def run(self, *args, stdin=None):
        r = subprocess.run([self.binary, "tokenizer", *args], input=stdin, capture_output=True)
        if r.returncode != 0:
            raise RuntimeError(f"moet tokenizer {' '.join(args)} failed: {r.stderr.decode()}")
        return r.stdout

    def encode(self, tok, texts, threads=2):
        path = os.path.join(self.workdir, "texts.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps(t) + "\n")
        out = self.run("encode", "--tokenizer", tok, "--input", path, "--jsonl", "--threads",
                       str(threads)).decode()
        return [[int(x) for x in line.split()] for line in out.split("\n")[: len(texts)]]

    def encode_raw_lines(self, tok, lines):
        path = os.path.join(self.workdir, "raw.txt")
        with open(path, "wb") as f:
            f.write(b"\n".join(lines))
        out = self.run("encode", "--tokenizer", tok, "--input", path).decode()
        return [[int(x) for x in line.split()] for line in out.split("\n")[: len(lines)]]

    def decode(self, tok, id_lists):
        path = os.path.join(self.workdir, "ids.txt")
        with open(path, "w") as f:
            for ids in id_lists:
                f.write(" ".join(map(str, ids)) + "\n")
        out = self.run("decode", "--tokenizer", tok, "--input", path).decode()
        return [json.loads(line) for line in out.split("\n")[: len(id_lists)]]


failures = []


def check(name, got, want, texts):
    bad = [i for i in range(len(want)) if got[i] != want[i]]
    if bad:
        i = bad[0]
        failures.append(name)
        print(f"FAIL {name}: {len(bad)} of {len(want)} differ; first: {texts[i]!r}\n"
              f"  moet:       {got[i]}\n  tokenizers: {want[i]}")
    else:
        print(f"ok   {name}: {len(want)} cases equal")


def compare(moet, name, path, texts, rng):
    hf = Tokenizer.from_file(path)
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    check(f"{name} encode", moet.encode(path, texts), want, texts)
    check(f"{name} encode, 1 thread", moet.encode(path, texts[:50], threads=1), want[:50], texts)
    # Round trips and random id sequences (lone bytes of multi-byte characters, special tokens).
    vocab = hf.get_vocab_size()
    randoms = [[rng.randrange(vocab) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    lists = want + randoms
    check(f"{name} decode", moet.decode(path, lists),
          [hf.decode(ids, skip_special_tokens=False) for ids in lists], [str(x) for x in lists])
    return hf


def bpe_trainer(vocab, specials):
    return trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, min_frequency=2,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                               show_progress=False)


def train_hf(pre, text_file, out, vocab=3000, specials=("<|endoftext|>", "<|pad|>")):
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre
    t.decoder = decoders.ByteLevel()
    t.train([text_file], bpe_trainer(vocab, list(specials)))
    t.save(out)
    return out


def edit(path, out, fn):
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    fn(j)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return out


LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
DEEPSEEK = [r"\p{N}{1,3}", "[一-龥\u3040-ゟ゠-ヿ]+",
            r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
            r"""| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moet", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    rng = random.Random(1234)
    moet = Moet(a.moet, a.workdir)
    texts = make_corpus(rng, 600)
    text_file = os.path.join(a.workdir, "train.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write(training_text(rng))
    w = lambda name: os.path.join(a.workdir, name)  # noqa: E731

    # (a) trained by moet, loaded by tokenizers and transformers.
    moet.run("train", "--input", text_file, "--vocab-size", "3000", "--output", w("a.json"))
    try:
        moet.run("train", "--input", text_file, "--vocab-size", "3000", "--output", w("a.json"))
        failures.append("train refuses to overwrite")
        print("FAIL train wrote over an existing output without --overwrite")
    except RuntimeError as e:
        print(f"ok   train refuses to overwrite: {str(e).strip().splitlines()[-1]}")
    compare(moet, "(a) moet-trained", w("a.json"), texts, rng)
    from transformers import PreTrainedTokenizerFast
    fast = PreTrainedTokenizerFast(tokenizer_file=w("a.json"))
    check("(a) moet-trained via PreTrainedTokenizerFast",
          moet.encode(w("a.json"), texts), [fast.encode(t, add_special_tokens=False) for t in texts],
          texts)

    # (b) GPT-2 style, trained by tokenizers; then a variant with added tokens and a template.
    b = train_hf(pre_tokenizers.ByteLevel(add_prefix_space=False), text_file, w("b.json"))
    compare(moet, "(b) GPT-2 style", b, texts, rng)

    def variant(j):
        j["pre_tokenizer"]["add_prefix_space"] = True
        n = first = max(j["model"]["vocab"].values()) + 1
        extra = [("<s>", True, {}), ("</s>", True, {}),
                 ("[MASK]", True, {"lstrip": True, "rstrip": True}),
                 ("hello world", False, {"normalized": True}),
                 ("ing", False, {"single_word": True, "normalized": False}),
                 ("Привет", False, {"lstrip": True})]
        vocab = j["model"]["vocab"]
        for content, special, opts in extra:
            # Ids as tokenizers gives them: the model's for a token it has, else the next free.
            if content in vocab:
                tid = vocab[content]
            else:
                tid, n = n, n + 1
            tok = {"id": tid, "content": content, "single_word": False, "lstrip": False,
                   "rstrip": False, "normalized": not special, "special": special}
            tok.update(opts)
            j["added_tokens"].append(tok)
        j["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [first], "tokens": ["<s>"]},
                               "</s>": {"id": "</s>", "ids": [first + 1], "tokens": ["</s>"]}}}
    b2 = edit(b, w("b2.json"), variant)
    hf_b2 = compare(moet, "(b') prefix space, added tokens", b2, texts, rng)
    path = w("texts.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
    out = moet.run("encode", "--tokenizer", b2, "--input", path, "--jsonl",
                   "--add-special-tokens").decode().split("\n")
    check("(b') encode with add_special_tokens", [[int(x) for x in l.split()] for l in out],
          [e.ids for e in hf_b2.encode_batch(texts)], texts)

    # (c) Llama 3 and DeepSeek-V3 style pre-tokenizers, trained by tokenizers.
    llama_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    c = train_hf(llama_pre, text_file, w("c_llama3.json"),
                 specials=("<|begin_of_text|>", "<|end_of_text|>"))
    compare(moet, "(c) Llama 3 style", c, texts, rng)

    def llama_extras(j):
        j["model"]["ignore_merges"] = True
        j["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [0],
                                                      "tokens": ["<|begin_of_text|>"]}}}]}
    c2 = edit(c, w("c_llama3_ignore_merges.json"), llama_extras)
    hf_c2 = compare(moet, "(c) Llama 3 style, ignore_merges", c2, texts, rng)
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
    out = moet.run("encode", "--tokenizer", c2, "--input", path, "--jsonl",
                   "--add-special-tokens").decode().split("\n")
    check("(c) Llama 3 style with add_special_tokens (BOS)",
          [[int(x) for x in l.split()] for l in out], [e.ids for e in hf_c2.encode_batch(texts)],
          texts)
    ds_pre = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated", invert=False) for r in DEEPSEEK]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    d = train_hf(ds_pre, text_file, w("c_deepseek_v3.json"),
                 specials=("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"))
    compare(moet, "(c) DeepSeek-V3 style", d, texts, rng)

    # Qwen 2 style: NFC, Split with single digits, ByteLevel without regex; a normalized added
    # token written decomposed.
    qwen_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    q = train_hf(qwen_pre, text_file, w("c_qwen2.json"), specials=("<|endoftext|>", "<|im_end|>"))

    def qwen_extras(j):
        j["normalizer"] = {"type": "NFC"}
        n = max(j["model"]["vocab"].values()) + 1
        j["added_tokens"].append({"id": n, "content": "Cafe\u0301!", "single_word": False,
                                  "lstrip": False, "rstrip": False, "normalized": True,
                                  "special": False})
    q2 = edit(q, w("c_qwen2_nfc.json"), qwen_extras)
    nfc_texts = texts + ["Cafe\u0301! Café! e\u0301\u0301 \u212b \u1100\u1161\u11a8 Å",
                         "\u0041\u030a\u0301 ḍ̇ q̣̇ \uf900 \u2126 \u00c5"]
    compare(moet, "(c) Qwen 2 style with NFC", q2, nfc_texts, rng)

    # (d) Split behaviours and Digits on tokenizer (b)'s model.
    cases = {
        "removed": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed",
                    "invert": False},
        "merged_with_previous": {"type": "Split", "pattern": {"Regex": r"\s+"},
                                 "behavior": "MergedWithPrevious", "invert": False},
        "merged_with_next": {"type": "Split", "pattern": {"Regex": r"\p{P}"},
                             "behavior": "MergedWithNext", "invert": False},
        "contiguous": {"type": "Split", "pattern": {"Regex": r"\p{L}"}, "behavior": "Contiguous",
                       "invert": False},
        "inverted": {"type": "Split", "pattern": {"Regex": r"\p{L}+"}, "behavior": "Removed",
                     "invert": True},
        "digits": {"type": "Digits", "individual_digits": True},
        "digits_runs": {"type": "Digits", "individual_digits": False},
    }
    for name, step in cases.items():
        def set_pre(j, step=step):
            j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
                step, {"type": "ByteLevel", "add_prefix_space": name == "digits",
                       "trim_offsets": True, "use_regex": name.startswith("digits")}]}
        p = edit(b, w(f"d_{name}.json"), set_pre)
        hf = Tokenizer.from_file(p)
        check(f"(d) {name}", moet.encode(p, texts[:200]),
              [e.ids for e in hf.encode_batch(texts[:200], add_special_tokens=False)], texts)

    # Invalid UTF-8: encoded as Python's bytes.decode("utf-8", "replace") (U+FFFD per maximal
    # ill-formed subpart).
    raw = [b"abc\xff\xfe def", b"\xe2\x82 cut euro", b"\xf0\x9f\x98", b"\xed\xa0\x80 surrogate",
           b"\xc0\xaf overlong", b"ok \xe2\x82\xac \x80\x80 x", b"\xf4\x90\x80\x80 too big",
           b"tail \xe4\xb8"]
    hf = Tokenizer.from_file(b)
    check("invalid UTF-8 encodes as its U+FFFD replacement", moet.encode_raw_lines(b, raw),
          [hf.encode(x.decode("utf-8", "replace"), add_special_tokens=False).ids for x in raw],
          raw)

    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        return 1
    print("all tokenizer interop checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
