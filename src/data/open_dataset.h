// The dataset a `--data` argument names (moet train, moet eval; docs/data.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/documents.h"

namespace moet {

class Tokenizer;

// The data a `--data` argument names, as `moet train` reads it (docs/data.md): "" (the default
// English corpus), "mock" (random tokens), a Megatron prefix (PREFIX.idx exists; PREFIX.idx or
// PREFIX.bin name it too), a blend "W1 PREFIX1 W2 PREFIX2 ...", or a text file or a directory of
// them (tokenized with `tokenizer` as they are read; `format`: where their documents end, which
// JSONL field holds them).
// `split` ("95,5"; "" for that default) divides documents into training and held-out data. Throws
// moet::Error when the data need a larger vocabulary than vocab_size.
// The Megatron prefixes a --data argument names (one for a prefix, each of a blend's); empty for
// text, a directory, "mock" or the default corpus.
std::vector<std::string> indexed_prefixes(const std::string& spec);

std::unique_ptr<TokenDataset> open_token_dataset(const std::string& spec,
                                                 const Tokenizer& tokenizer, int64_t vocab_size,
                                                 uint64_t seed, const std::string& split = "",
                                                 const TextFormat& format = {});

}  // namespace moet
