#include "atomic_file.h"

namespace kvfs {

Status WriteFileAtomically(FileSystem& fs, const std::string& dir, const std::string& name,
                           std::string_view bytes) {
  const std::string tmp = dir + "/" + name + ".tmp";
  const std::string final_path = dir + "/" + name;
  Status st;
  {
    auto file = fs.Open(tmp, {.write = true, .create = true, .truncate = true});
    if (!file.ok()) return file.status();
    st = (*file)->WriteAt(bytes.data(), bytes.size(), 0);
    if (st.ok()) st = (*file)->DataSync();
  }
  if (st.ok()) st = fs.Rename(tmp, final_path);
  if (!st.ok()) {
    (void)fs.Unlink(tmp);  // a full disk must not keep a half-written copy around
    return st;
  }
  return fs.SyncDir(dir);
}

Result<std::string> ReadWholeFile(FileSystem& fs, const std::string& path) {
  KVFS_ASSIGN_OR_RETURN(auto file, fs.Open(path, {}));
  std::string data;
  uint64_t offset = 0;
  for (;;) {
    data.resize(offset + (1 << 16));
    KVFS_ASSIGN_OR_RETURN(size_t n, file->ReadSome(data.data() + offset, 1 << 16, offset));
    offset += n;
    if (n < (1u << 16)) break;
  }
  data.resize(offset);
  return data;
}

}  // namespace kvfs
