// The options record (src/train/option_fields.h): every field round-trips through run.json, each
// row reaches its own member, docs/training.md's table is the table's, and run directories
// written before the table (tests/fixtures/run-0522865, moet at commit 0522865) still load.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "core/file_io.h"
#include "train/option_fields.h"

namespace moet {
namespace {

// Sets field f of `o` to a value other than its default, made from `salt`.
void set_other(const OptionField& f, TrainOptions& o, int salt) {
  std::visit(
      [&](auto ref) {
        using Ref = decltype(ref);
        if constexpr (std::is_same_v<Ref, ChoiceRef>) {
          const std::vector<std::string> now = ref.get(o);
          std::vector<std::string> words;
          for (const std::string& w : ref.words)
            if (now.empty() || w != now[0]) {
              words.push_back(w);
              if (!ref.list) break;
            }
          ASSERT_FALSE(words.empty()) << f.key;
          ASSERT_EQ(ref.set(o, words), "") << f.key;
        } else {
          auto& v = ref(o);
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>)
            v = !v;
          else if constexpr (std::is_same_v<T, std::string>)
            v = "value-" + std::to_string(salt);
          else if constexpr (std::is_same_v<T, std::optional<double>>)
            v = 0.5 + salt;
          else if constexpr (std::is_same_v<T, std::optional<int64_t>> ||
                             std::is_same_v<T, std::optional<uint64_t>>)
            v = 1000 + salt;
          else
            v = static_cast<T>(1000 + salt);
        }
      },
      f.access);
}

TEST(OptionFields, EveryFieldRoundTripsThroughRunJson) {
  TrainOptions o;
  int salt = 0;
  for (const OptionField& f : train_option_fields()) set_other(f, o, ++salt);
  const nlohmann::json j = to_json(o);
  const TrainOptions back = train_options_from_json(j, "test");
  EXPECT_EQ(to_json(back), j);
  for (const OptionField& f : train_option_fields())
    EXPECT_EQ(option_json(f, back), option_json(f, o)) << f.group << "." << f.key;
}

TEST(OptionFields, EachRowReachesItsOwnMember) {
  const TrainOptions defaults;
  std::set<std::string> keys, flags;
  for (const OptionField& f : train_option_fields()) {
    EXPECT_TRUE(keys.insert(std::string(f.group) + "." + f.key).second) << f.key;
    if (*f.flags) {
      EXPECT_TRUE(flags.insert(f.flags).second) << f.flags;
    }
    TrainOptions o;
    set_other(f, o, 7);
    for (const OptionField& g : train_option_fields()) {
      const bool same = option_json(g, o) == option_json(g, defaults);
      EXPECT_EQ(same, &g != &f) << "setting " << f.key << " changed " << g.key;
    }
  }
}

TEST(OptionFields, WrongTypesAndWordsAreOneLine) {
  const nlohmann::json steps = {{"optim", {{"steps", "many"}}}};
  try {
    train_options_from_json(steps, "run.json");
    FAIL() << "accepted a string for steps";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("run.json: options.optim.steps is not an integer"),
              std::string::npos)
        << e.what();
  }
  const nlohmann::json word = {{"precision", {{"precision", "fp4"}}}};
  try {
    train_options_from_json(word, "run.json");
    FAIL() << "accepted an unknown recipe";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("options.precision.precision 'fp4' is not one of auto"),
              std::string::npos)
        << e.what();
  }
}

// docs/training.md holds the table between these lines, as train_options_markdown() makes it.
TEST(OptionFields, DocsTableIsTheRecords) {
  const std::string doc = read_text_file(std::string(MOET_SOURCE_DIR) + "/docs/training.md");
  const std::string begin = "<!-- options table: made from src/train/option_fields.cpp -->\n";
  const std::string end = "<!-- end of the options table -->";
  const size_t a = doc.find(begin), b = doc.find(end);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_EQ(doc.substr(a + begin.size(), b - a - begin.size()), train_options_markdown())
      << "docs/training.md's options table differs from the record; it should read:\n"
      << train_options_markdown();
}

TEST(OptionFields, RunsWrittenBeforeTheTableStillLoad) {
  const std::string dir = std::string(MOET_SOURCE_DIR) + "/tests/fixtures/run-0522865";
  const nlohmann::json run = nlohmann::json::parse(read_text_file(dir + "/run.json"));
  const TrainOptions o = train_options_from_json(run["options"], "run.json");
  EXPECT_EQ(o.optim.steps, 2);
  EXPECT_EQ(o.data.seq, 16);
  EXPECT_EQ(o.data.micro_batch, 2);
  EXPECT_EQ(o.data.spec, "mock");
  ASSERT_TRUE(o.precision.recipe.has_value());
  EXPECT_EQ(*o.precision.recipe, Recipe::FP32);
  EXPECT_EQ(o.data.split, "95,5");
  const nlohmann::json ckpt =
      nlohmann::json::parse(read_text_file(dir + "/step-0000002/checkpoint.json"));
  EXPECT_EQ(to_json(train_options_from_json(ckpt["run"]["options"], "checkpoint.json")),
            to_json(o));
}

}  // namespace
}  // namespace moet
