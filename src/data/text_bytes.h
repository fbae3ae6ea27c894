// UTF-8 checks, NFC and the GPT-2 byte-level alphabet: what the byte-level BPE tokenizer
// (bpe_tokenizer.h) and its trainer (bpe_trainer.h) do to text before and after the model.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace moet {

// Length of the valid UTF-8 prefix of `s` (s.size() when all of it is valid).
size_t utf8_valid_prefix(std::string_view s);

// `s` with every invalid UTF-8 sequence replaced by U+FFFD, one per maximal ill-formed
// subpart (the Unicode "substitution of maximal subparts" practice that Rust's
// String::from_utf8_lossy and Python's bytes.decode("utf-8", "replace") follow).
std::string utf8_replace_invalid(std::string_view s);

// Unicode Normalization Form C of valid UTF-8 `s` (ICU; text below U+0300 is returned as it
// is without a conversion, being NFC already).
std::string nfc(std::string_view s);

// Appends code point `cp` as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's byte-level alphabet: each byte stands for one printable code point ('!'..'~',
// U+00A1..U+00AC, U+00AE..U+00FF stand for themselves; the 68 others are U+0100 onwards in
// byte order), so a token of any bytes is a printable string in tokenizer.json.
uint32_t byte_to_unicode(uint8_t b);
// The byte a code point stands for, or -1 when it is not in the alphabet.
int byte_from_unicode(uint32_t cp);

// The byte-level spelling of raw bytes (what tokenizer.json's vocab and merges hold).
std::string bytes_to_byte_level(std::string_view bytes);
// The raw bytes of a byte-level spelling; false (out unspecified) when `text` is not valid
// UTF-8 or holds a code point outside the alphabet.
bool byte_level_to_bytes(std::string_view text, std::string& out);

}  // namespace moet
