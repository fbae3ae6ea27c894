// Whole-file reads and writes for configs, indexes, traces and other small files.
#pragma once
#include <string>

namespace moet {

// The bytes of `path`; throws moet::Error "cannot open 'PATH'" (or a read error) otherwise.
std::string read_text_file(const std::string& path);

// Writes `text` to `path` through a temporary file beside it (PATH.tmp.PID) and a rename, so a
// reader sees the old file or the new one, never a part, and a failed write leaves neither a
// partial file nor the temporary one. Refuses an existing `path` unless `overwrite` (checked
// before writing and again just before the rename). `durable`: the file is fsynced before the
// rename and its directory after (checkpoints), so the rename survives a power loss.
void write_file_atomically(const std::string& path, const std::string& text, bool overwrite,
                           bool durable = false);

// moet's cache directory: $MOET_CACHE_DIR, else $XDG_CACHE_HOME/moet, else ~/.cache/moet ("" when
// none of them is set). Sample indices of read-only data and the measured GEMM speeds live there.
std::string user_cache_dir();

// fsync of a file, or of a directory's entries (after creating or renaming in it).
void fsync_path(const std::string& path, bool directory);

}  // namespace moet
