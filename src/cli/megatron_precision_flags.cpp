#include "cli/megatron_precision_flags.h"

#include <optional>

#include "core/error.h"

namespace moet::cli {

namespace {

// The value of `--name V` or `--name=V` at args[i] (advancing i past it), or nullopt when
// args[i] is not that flag.
std::optional<std::string> value_of(const std::vector<std::string>& args, size_t& i,
                                    const std::string& name) {
  const std::string& a = args[i];
  if (a.rfind(name + "=", 0) == 0) return a.substr(name.size() + 1);
  if (a != name) return std::nullopt;
  MOET_CHECK(i + 1 < args.size(), "Megatron's ", name, " needs a value");
  return args[++i];
}

}  // namespace

std::vector<std::string> translate_megatron_precision_flags(const std::vector<std::string>& argv) {
  if (argv.size() < 2 || argv[1] != "train") return argv;
  std::optional<std::string> format, recipe, start, end, precision;
  bool first_last = false, any = false;
  std::vector<std::string> rest;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--") {  // the rest are values
      rest.insert(rest.end(), argv.begin() + std::ptrdiff_t(i), argv.end());
      break;
    }
    if (auto v = value_of(argv, i, "--fp4-format")) {
      format = v, any = true;
    } else if (auto r = value_of(argv, i, "--fp4-recipe")) {
      recipe = r, any = true;
    } else if (auto s = value_of(argv, i, "--num-layers-at-start-in-bf16")) {
      start = s, any = true;
    } else if (auto e = value_of(argv, i, "--num-layers-at-end-in-bf16")) {
      end = e, any = true;
    } else if (argv[i] == "--first-last-layers-bf16") {
      first_last = any = true;
    } else {
      size_t j = i;
      if (auto p = value_of(argv, j, "--precision")) precision = p;
      rest.push_back(argv[i]);
    }
  }
  if (!any) return argv;
  MOET_CHECK(!format || *format == "e2m1",
             "Megatron's --fp4-format takes e2m1 (E2M1 elements), got '", *format, "'");
  MOET_CHECK(!recipe || *recipe == "nvfp4" || *recipe == "mxfp4",
             "Megatron's --fp4-recipe takes nvfp4 or mxfp4 here, got '", *recipe, "'");
  MOET_CHECK(format.has_value() == recipe.has_value(),
             format ? "Megatron's --fp4-format e2m1 needs --fp4-recipe nvfp4 or mxfp4"
                    : "Megatron's --fp4-recipe needs --fp4-format e2m1");
  MOET_CHECK(!recipe || !precision || *precision == *recipe, "--precision ", *precision,
             " contradicts Megatron's --fp4-recipe ", *recipe, " (give one of them)");
  MOET_CHECK(first_last || (!start && !end), "Megatron's --num-layers-at-", start ? "start" : "end",
             "-in-bf16 takes effect with --first-last-layers-bf16 (moet: --bf16-layers, "
             "--bf16-layers-end)");
  // moet's flags right after "train", so the command line's own (later) flags still win
  std::vector<std::string> moet_flags;
  if (recipe) moet_flags.insert(moet_flags.end(), {"--precision", *recipe});
  if (first_last) {
    moet_flags.insert(moet_flags.end(), {"--bf16-layers", start.value_or("1")});
    moet_flags.insert(moet_flags.end(), {"--bf16-layers-end", end.value_or("1")});
  } else {
    moet_flags.insert(moet_flags.end(), {"--bf16-layers", "0", "--bf16-layers-end", "0"});
  }
  rest.insert(rest.begin() + 2, moet_flags.begin(), moet_flags.end());
  return rest;
}

}  // namespace moet::cli
