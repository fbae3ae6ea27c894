// `moet train` under Megatron-LM's spelling of the 4-bit recipes (issue 38): --fp4-format e2m1
// --fp4-recipe nvfp4|mxfp4 [--first-last-layers-bf16 [--num-layers-at-start-in-bf16 N]
// [--num-layers-at-end-in-bf16 N]], translated to moet's own flags before they are parsed, with
// Megatron's meaning: the recipe is --precision nvfp4|mxfp4; without --first-last-layers-bf16
// every decoder layer is in FP4 (--bf16-layers 0 --bf16-layers-end 0); with it the first and last
// N layers (default 1 each, as Megatron's) stay bf16. Other Megatron names get a one-line pointer
// to moet's (suggest.cpp).
#pragma once
#include <string>
#include <vector>

namespace moet::cli {

// argv with a train command's Megatron FP4 flags replaced by moet's (argv unchanged for other
// commands, or when none is given). Throws one moet::Error line for a combination Megatron would
// not run or that contradicts moet's own flags (--fp4-recipe without --fp4-format e2m1, another
// --precision, a layer count without --first-last-layers-bf16).
std::vector<std::string> translate_megatron_precision_flags(const std::vector<std::string>& argv);

}  // namespace moet::cli
