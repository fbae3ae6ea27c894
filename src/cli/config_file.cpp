#include "cli/config_file.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace moet::cli {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// A YAML scalar: quotes taken off, a trailing comment dropped.
std::string scalar(std::string v) {
  v = trim(v);
  if (v.size() >= 2 && (v[0] == '"' || v[0] == '\'')) {
    const size_t end = v.find(v[0], 1);
    if (end != std::string::npos) return v.substr(1, end - 1);
  }
  const size_t hash = v.find(" #");
  return trim(hash == std::string::npos ? v : v.substr(0, hash));
}

std::string flag_of(std::string key) {
  for (char& c : key)
    if (c == '_') c = '-';
  return "--" + key;
}

void add(std::vector<std::string>& out, const std::string& key, const std::vector<std::string>& v,
         bool is_bool, bool truth) {
  if (is_bool) {
    if (truth) out.push_back(flag_of(key));
    return;
  }
  out.push_back(flag_of(key));
  out.insert(out.end(), v.begin(), v.end());
}

std::vector<std::string> from_json(const std::string& path, const std::string& text) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    MOET_FAIL("--config '", path, "' is not valid JSON: ", e.what());
  }
  MOET_CHECK(j.is_object(), "--config '", path, "' must hold a JSON object of flags");
  std::vector<std::string> out;
  auto text_of = [&](const std::string& key, const nlohmann::ordered_json& v) {
    MOET_CHECK(v.is_string() || v.is_number(), "--config '", path, "': '", key,
               "' must be a string, a number, true/false or a list of them");
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;
    if (v.is_boolean()) {
      add(out, key, {}, true, v.get<bool>());
    } else if (v.is_array()) {
      std::vector<std::string> vals;
      for (const auto& x : v) vals.push_back(text_of(key, x));
      add(out, key, vals, false, false);
    } else {
      add(out, key, {text_of(key, v)}, false, false);
    }
  }
  return out;
}

std::vector<std::string> from_yaml(const std::string& path, const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line, key;
  std::vector<std::string> list;  // a block list in progress under `key`
  bool in_list = false;
  int number = 0;
  auto finish_list = [&] {
    if (in_list) add(out, key, list, false, false);
    in_list = false;
    list.clear();
  };
  while (std::getline(in, line)) {
    ++number;
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t == "---") continue;
    const std::string where = str("--config '", path, "' line ", number);
    if (t[0] == '-' && (t.size() == 1 || t[1] == ' ')) {
      MOET_CHECK(in_list, where, ": a list item without a key above it");
      list.push_back(scalar(t.substr(1)));
      continue;
    }
    MOET_CHECK(line[0] != ' ' && line[0] != '\t', where,
               ": nested mappings are not flags (one 'flag: value' per line)");
    finish_list();
    const size_t colon = t.find(':');
    MOET_CHECK(colon != std::string::npos && colon > 0, where, ": '", t, "' is not 'flag: value'");
    key = trim(t.substr(0, colon));
    const std::string raw = trim(t.substr(colon + 1));
    const std::string v = scalar(raw);
    if (v.empty() && (raw.empty() || raw[0] == '#')) {  // a block list follows
      in_list = true;
      continue;
    }
    if (v == "true" || v == "false" || v == "yes" || v == "no") {
      add(out, key, {}, true, v == "true" || v == "yes");
    } else if (v == "null" || v == "~") {
      continue;
    } else if (v.front() == '[') {
      MOET_CHECK(v.back() == ']', where, ": an inline list must end with ']'");
      std::vector<std::string> vals;
      std::istringstream items(v.substr(1, v.size() - 2));
      std::string item;
      while (std::getline(items, item, ','))
        if (!trim(item).empty()) vals.push_back(scalar(item));
      add(out, key, vals, false, false);
    } else {
      MOET_CHECK(v.front() != '{', where, ": nested mappings are not flags");
      add(out, key, {v}, false, false);
    }
  }
  finish_list();
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> flags_from_config_file(const std::string& path) {
  const std::string text = read_text_file(path);
  const size_t at = text.find_first_not_of(" \t\r\n");
  if (ends_with(path, ".json") || (at != std::string::npos && text[at] == '{'))
    return from_json(path, text);
  MOET_CHECK(ends_with(path, ".yaml") || ends_with(path, ".yml"), "--config '", path,
             "': give a .yaml, .yml or .json file");
  return from_yaml(path, text);
}

std::vector<std::string> expand_config_file(const std::vector<std::string>& argv,
                                            std::string* config_path) {
  config_path->clear();
  if (argv.size() < 2 || argv[1] != "train") return argv;
  std::vector<std::string> rest;
  for (size_t i = 2; i < argv.size(); ++i) {
    if (argv[i] == "--config") {
      MOET_CHECK(i + 1 < argv.size(), "--config needs a FILE.yaml or FILE.json");
      MOET_CHECK(config_path->empty(), "--config is given twice");
      *config_path = argv[++i];
    } else if (argv[i].rfind("--config=", 0) == 0) {
      MOET_CHECK(config_path->empty(), "--config is given twice");
      *config_path = argv[i].substr(9);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (config_path->empty()) return argv;
  std::vector<std::string> out = {argv[0], argv[1]};
  for (const std::string& f : flags_from_config_file(*config_path)) {
    MOET_CHECK(f != "--config", "--config '", *config_path, "' names another --config");
    out.push_back(f);
  }
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

}  // namespace moet::cli
