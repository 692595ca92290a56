#include "sim/common/output.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "sim/common/check.hpp"
#include "sim/common/cleanup.hpp"
#include "sim/common/dist.hpp"

namespace fp8sim {

namespace fs = std::filesystem;

namespace {

std::string describe(const std::string& option, const std::string& path) {
  return option.empty() ? fmt::format("'{}'", path) : fmt::format("{} '{}'", option, path);
}

std::atomic<int> g_data_fd{-1};
std::atomic<unsigned> g_tmp_counter{0};

// Follows the symbolic links of a path that does not exist (yet): the path a new file would get.
fs::path follow_dangling(const std::string& what, const fs::path& p) {
  fs::path cur = p;
  for (int hop = 0; hop < 40; ++hop) {
    struct stat st {};
    if (::lstat(cur.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return cur;
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(cur.c_str(), buf, sizeof buf - 1);
    FP8SIM_REQUIRE(n > 0, "cannot write {}: cannot read the link '{}': {}", what, cur.string(), std::strerror(errno));
    const fs::path next(std::string(buf, static_cast<size_t>(n)));
    cur = next.is_absolute() ? next : cur.parent_path() / next;
  }
  throw Error(fmt::format("cannot write {}: too many levels of symbolic links", what));
}

bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes > (size_t{1} << 30) ? (size_t{1} << 30) : bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

// ---- where an output goes ------------------------------------------------------------------------

OutputTarget resolve_output(const std::string& option, const std::string& path) {
  OutputTarget t;
  t.what = describe(option, path);
  if (path.empty())
    throw UsageError(fmt::format("{}an empty path: give a file name (or - for standard output)",
                                 option.empty() ? "" : option + " is "));
  // Standard output: "-", its names under /dev and /proc (which -q, having pointed descriptor 1 at
  // /dev/null, would otherwise send there), or the file or pipe it already writes to (`> f` with f
  // named again). A regular file behind it keeps its identity, so that another output or an input
  // naming the same file is refused. A character device (a terminal, /dev/null) named by its own
  // path is simply written in place.
  std::string squeezed;  // "//dev//stdout" names it too
  for (char c : path)
    if (c != '/' || squeezed.empty() || squeezed.back() != '/') squeezed += c;
  const bool alias =
      path == "-" || squeezed == "/dev/stdout" || squeezed == "/dev/fd/1" || squeezed == "/proc/self/fd/1";
  struct stat out_st {};
  const bool out_known = ::fstat(data_stdout_fd(), &out_st) == 0;
  struct stat st {};
  const bool found = !alias && ::stat(path.c_str(), &st) == 0;
  if (alias || (found && out_known && st.st_dev == out_st.st_dev && st.st_ino == out_st.st_ino &&
                !S_ISDIR(st.st_mode) && !S_ISCHR(st.st_mode))) {
    t.kind = OutputTarget::Kind::Stdout;
    t.path = path;
    if (out_known && S_ISREG(out_st.st_mode)) {
      t.exists = true;
      t.dev = out_st.st_dev;
      t.ino = out_st.st_ino;
    }
    return t;
  }
  if (found) {
    t.exists = true;
    t.dev = st.st_dev;
    t.ino = st.st_ino;
    if (S_ISDIR(st.st_mode)) throw Error(fmt::format("cannot write {}: it is a folder (give a file name)", t.what));
    if (S_ISBLK(st.st_mode))
      throw Error(
          fmt::format("cannot write {}: it is a block device (fp8sim writes regular files, character "
                      "devices, FIFOs and sockets)",
                      t.what));
    if (!S_ISREG(st.st_mode)) {
      t.kind = OutputTarget::Kind::Stream;
      t.char_device = S_ISCHR(st.st_mode);
      t.path = path;
      return t;
    }
    // A regular file, maybe behind links: replace the file the links lead to.
    char buf[PATH_MAX];
    FP8SIM_REQUIRE(::realpath(path.c_str(), buf) != nullptr, "cannot write {}: {}", t.what, std::strerror(errno));
    t.kind = OutputTarget::Kind::File;
    t.path = buf;
  } else {
    const int err = errno;
    if (err == ENOTDIR) {
      // Some folder on the way is a file: name it.
      for (fs::path dir = fs::path(path).parent_path(); !dir.empty(); dir = dir.parent_path()) {
        struct stat dst {};
        if (::stat(dir.c_str(), &dst) == 0 && !S_ISDIR(dst.st_mode))
          throw Error(fmt::format("cannot write {}: '{}' is not a folder", t.what, dir.string()));
        if (dir == dir.parent_path()) break;
      }
    }
    FP8SIM_REQUIRE(err == ENOENT, "cannot write {}: {}", t.what, std::strerror(err));
    t.kind = OutputTarget::Kind::File;
    t.path = follow_dangling(t.what, path);
  }
  if (t.path.filename().empty() || t.path.filename() == "." || t.path.filename() == "..")
    throw Error(fmt::format("cannot write {}: it names a folder (give a file name)", t.what));
  // The nearest existing ancestor must be a folder (missing folders below it are created by the
  // writer; a file in the way is an error now, before any work).
  for (fs::path dir = t.path.has_parent_path() ? t.path.parent_path() : fs::path(".");;) {
    struct stat pst {};
    if (::stat(dir.c_str(), &pst) == 0) {
      FP8SIM_REQUIRE(S_ISDIR(pst.st_mode), "cannot write {}: '{}' is not a folder", t.what, dir.string());
      break;
    }
    const int err = errno;
    if (err != ENOENT) throw Error(fmt::format("cannot write {}: '{}': {}", t.what, dir.string(), std::strerror(err)));
    t.missing_parent = true;
    if (!dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
  }
  return t;
}

// ---- one output ----------------------------------------------------------------------------------

AtomicFile::AtomicFile(const fs::path& target) : t_(resolve_output("", target.string())) { open(); }

AtomicFile::AtomicFile(const OutputTarget& target) : t_(target) { open(); }

void AtomicFile::open() {
  if (t_.missing_parent) {
    std::error_code ec;
    fs::create_directories(t_.path.parent_path(), ec);
  }
  switch (t_.kind) {
    case OutputTarget::Kind::Stdout:
      std::fflush(stdout);
      fd_ = data_stdout_fd();
      return;
    case OutputTarget::Kind::Stream: {
      fd_ = ::open(t_.path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
      if (fd_ < 0 && errno == ENXIO) {
        // A Unix socket cannot be opened, only connected to.
        struct sockaddr_un addr {};
        addr.sun_family = AF_UNIX;
        const std::string s = t_.path.string();
        if (s.size() < sizeof addr.sun_path) {
          std::memcpy(addr.sun_path, s.c_str(), s.size() + 1);
          fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
          if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
            const int err = errno;
            ::close(fd_);
            fd_ = -1;
            errno = err;
          }
        }
      }
      FP8SIM_REQUIRE(fd_ >= 0, "cannot write {}: {}", t_.what, std::strerror(errno));
      return;
    }
    case OutputTarget::Kind::File: {
      const fs::path parent = t_.path.has_parent_path() ? t_.path.parent_path() : fs::path(".");
      cleanup::remove_stale_temporaries(parent, t_.path.filename().string());
      tmp_ = parent / cleanup::temporary_name(t_.path, std::to_string(g_tmp_counter.fetch_add(1)));
      slot_ = cleanup::remember_path(tmp_, cleanup::PathKind::File);
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0) {
        const int err = errno;
        cleanup::forget_path(slot_);
        slot_ = -1;
        throw Error(fmt::format("cannot write {}: {}", t_.what, std::strerror(err)));
      }
      // The replaced file keeps its permission bits.
      struct stat st {};
      if (t_.exists && ::stat(t_.path.c_str(), &st) == 0) ::fchmod(fd_, st.st_mode & 07777);
      return;
    }
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0 && t_.kind != OutputTarget::Kind::Stdout) ::close(fd_);
  if (!tmp_.empty() && !committed_) ::unlink(tmp_.c_str());
  cleanup::forget_path(slot_);
}

void AtomicFile::write(const void* data, size_t bytes) {
  FP8SIM_CHECK(fd_ >= 0 && !committed_, "write to {} after commit", t_.what);
  FP8SIM_REQUIRE(write_all(fd_, data, bytes), "write to {} failed: {}", t_.what, std::strerror(errno));
}

void AtomicFile::commit() {
  FP8SIM_CHECK(!committed_, "{} committed twice", t_.what);
  if (t_.kind == OutputTarget::Kind::Stdout) {
    committed_ = true;
    return;
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error(fmt::format("write to {} failed: {}", t_.what, std::strerror(errno)));
  if (t_.kind == OutputTarget::Kind::Stream) {
    committed_ = true;
    return;
  }
  if (::rename(tmp_.c_str(), t_.path.c_str()) != 0) {
    const int err = errno;
    throw Error(fmt::format("cannot move {} into place: {}", t_.what,
                            err == EISDIR ? "a folder of that name appeared" : std::strerror(err)));
  }
  committed_ = true;
}

void write_file_atomic(const fs::path& p, std::string_view data) {
  AtomicFile f(p);
  f.write(data.data(), data.size());
  f.commit();
}

// ---- the files of one run ------------------------------------------------------------------------

namespace {

fs::path normalised(const std::string& p) {
  std::error_code ec;
  fs::path n = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) n = fs::absolute(p).lexically_normal();
  return n;
}

}  // namespace

RunFiles::~RunFiles() {
  outs_.clear();  // each uncommitted AtomicFile removes its temporary
  for (const auto& [dir, slot] : created_) {
    if (!committed_) ::rmdir(dir.c_str());  // only while empty: never a folder someone else filled
    cleanup::forget_path(slot);
  }
}

void RunFiles::create_parents(const OutputTarget& t) {
  std::vector<fs::path> missing;
  for (fs::path dir = t.path.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0) break;
    missing.push_back(dir);
    if (dir == dir.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    const int slot = cleanup::remember_path(*it, cleanup::PathKind::EmptyFolder);
    if (::mkdir(it->c_str(), 0777) != 0 && errno != EEXIST) {
      const int err = errno;
      cleanup::forget_path(slot);
      throw Error(
          fmt::format("cannot write {}: cannot create the folder '{}': {}", t.what, it->string(), std::strerror(err)));
    }
    created_.insert(created_.begin(), {*it, slot});  // deepest first
  }
}

void RunFiles::input(const std::string& option, const std::string& path) {
  if (path.empty()) return;
  In in;
  in.what = describe(option, path);
  if (path == "-") {
    in.norm = "-";
  } else {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
      in.exists = true;
      in.char_device = S_ISCHR(st.st_mode);
      in.dev = st.st_dev;
      in.ino = st.st_ino;
    }
    in.norm = normalised(path);
  }
  for (const Out& o : outs_)
    if (!in.char_device && in.norm != "-" &&
        ((in.exists && o.target.exists && in.dev == o.target.dev && in.ino == o.target.ino) ||
         (o.target.kind == OutputTarget::Kind::File && in.norm == o.target.path)))
      throw UsageError(
          fmt::format("{} is also the input {}: fp8sim never writes over its inputs", o.target.what, in.what));
  ins_.push_back(std::move(in));
}

int RunFiles::output(const std::string& option, const std::string& path) {
  FP8SIM_CHECK(!committed_, "output declared after commit");
  OutputTarget t = resolve_output(option, path);
  if (t.kind == OutputTarget::Kind::File) t.path = normalised(t.path.string());
  for (const In& in : ins_) {
    if (in.char_device) continue;
    const bool same = (in.exists && t.exists && in.dev == t.dev && in.ino == t.ino) ||
                      (t.kind == OutputTarget::Kind::File && in.norm == t.path);
    if (same)
      throw UsageError(fmt::format("{} is also the input {}: fp8sim never writes over its inputs", t.what, in.what));
  }
  for (const Out& out : outs_) {
    const OutputTarget& o = out.named;
    if (t.kind == OutputTarget::Kind::Stdout && o.kind == OutputTarget::Kind::Stdout)
      throw UsageError(
          fmt::format("{} and {} both go to standard output: give one of them a file name", o.what, t.what));
    if (t.char_device && o.char_device) continue;  // /dev/null twice is fine
    const bool same = (t.exists && o.exists && t.dev == o.dev && t.ino == o.ino) ||
                      (t.kind == OutputTarget::Kind::File && o.kind == OutputTarget::Kind::File && t.path == o.path);
    if (same) throw UsageError(fmt::format("{} and {} name the same file", o.what, t.what));
  }
  Out o;
  o.named = t;
  // Rank 0 alone writes a distributed run's outputs (sim/common/dist.hpp); the others check the
  // same paths and then write to /dev/null.
  if (!dist::is_root()) t = resolve_output(option, "/dev/null");
  if (t.kind == OutputTarget::Kind::Stdout) silence_stdout();
  if (t.missing_parent) create_parents(t);
  o.target = std::move(t);
  outs_.push_back(std::move(o));
  return static_cast<int>(outs_.size()) - 1;
}

void RunFiles::write(int id, std::string data) {
  FP8SIM_CHECK(id >= 0 && static_cast<size_t>(id) < outs_.size(), "no output {}", id);
  Out& o = outs_[static_cast<size_t>(id)];
  FP8SIM_CHECK(!o.has_content, "{} written twice", o.target.what);
  o.has_content = true;
  if (o.target.kind == OutputTarget::Kind::File) {
    o.file = std::make_unique<AtomicFile>(o.target);
    o.file->write(data);
  } else {
    o.data = std::move(data);
  }
}

void RunFiles::write(int id, std::function<void(AtomicFile&)> writer) {
  FP8SIM_CHECK(id >= 0 && static_cast<size_t>(id) < outs_.size(), "no output {}", id);
  Out& o = outs_[static_cast<size_t>(id)];
  FP8SIM_CHECK(!o.has_content, "{} written twice", o.target.what);
  o.has_content = true;
  if (o.target.kind == OutputTarget::Kind::File) {
    o.file = std::make_unique<AtomicFile>(o.target);
    writer(*o.file);
  } else {
    o.writer = std::move(writer);
  }
}

AtomicFile& RunFiles::stream(int id) {
  FP8SIM_CHECK(id >= 0 && static_cast<size_t>(id) < outs_.size(), "no output {}", id);
  Out& o = outs_[static_cast<size_t>(id)];
  FP8SIM_CHECK(!o.has_content, "{} written twice", o.target.what);
  o.has_content = true;
  o.file = std::make_unique<AtomicFile>(o.target);
  return *o.file;
}

void RunFiles::commit() {
  FP8SIM_CHECK(!committed_, "run outputs committed twice");
  dist::check_all_ok();  // a distributed run writes nothing after a failure on any rank
  if (const std::string e = stdout_write_error(); !e.empty()) throw Error(e);
  // Inputs found by name or by default during the run (a model, a registry recipe, the default
  // calibration) are checked here, before anything is written or renamed.
  for (const Out& o : outs_)
    if (o.has_content && o.target.kind == OutputTarget::Kind::File)
      refuse_overwriting_input(o.target.what, o.target.path);
  // Streams first: they cannot be taken back, but a failure there still leaves no file output.
  for (Out& o : outs_) {
    if (!o.has_content || o.target.kind == OutputTarget::Kind::File) continue;
    if (!o.file) {
      o.file = std::make_unique<AtomicFile>(o.target);
      if (o.writer) o.writer(*o.file);
      else o.file->write(o.data);
    }
    o.file->commit();
  }
  for (Out& o : outs_)
    if (o.has_content && o.target.kind == OutputTarget::Kind::File) o.file->commit();
  committed_ = true;
}

// ---- standard output as data -------------------------------------------------------------------

void silence_stdout() {
  if (g_data_fd.load() >= 0) return;
  std::fflush(stdout);
  const int keep = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (keep < 0 || null < 0) {
    if (keep >= 0) ::close(keep);
    if (null >= 0) ::close(null);
    return;
  }
  ::dup2(null, STDOUT_FILENO);
  ::close(null);
  g_data_fd.store(keep);
}

int data_stdout_fd() {
  const int fd = g_data_fd.load();
  return fd >= 0 ? fd : STDOUT_FILENO;
}

bool stdout_silenced() { return g_data_fd.load() >= 0; }

std::string stdout_write_error() {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stdout)) return {};
  return fmt::format("cannot write to standard output: {}",
                     !flushed && err != 0 ? std::strerror(err) : "an earlier write failed");
}

// ---- inputs ----------------------------------------------------------------------------------------

namespace {
std::mutex g_read_mu;
std::map<std::pair<dev_t, ino_t>, fs::path> g_read;  // each file once
thread_local int t_unrecorded = 0;                   // UnrecordedReads alive on this thread

void note_read(const fs::path& p, const struct stat& st) {
  if (t_unrecorded > 0) return;
  std::error_code ec;
  const fs::path a = fs::absolute(p, ec);
  const std::lock_guard lock(g_read_mu);
  g_read.try_emplace({st.st_dev, st.st_ino}, ec ? p : a.lexically_normal());
}
}  // namespace

UnrecordedReads::UnrecordedReads() { ++t_unrecorded; }
UnrecordedReads::~UnrecordedReads() { --t_unrecorded; }

void note_input_read(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) note_read(p, st);
}

void forget_inputs_read() {
  const std::lock_guard lock(g_read_mu);
  g_read.clear();
}

std::vector<InputRead> inputs_read() {
  const std::lock_guard lock(g_read_mu);
  std::vector<InputRead> out;
  for (const auto& [id, path] : g_read) out.push_back({path, id.first, id.second});
  return out;
}

void refuse_overwriting_input(const std::string& what, const fs::path& target) {
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0) return;
  std::error_code ec;
  const fs::path t = fs::absolute(target, ec).lexically_normal();
  for (const InputRead& r : inputs_read())
    if (r.dev == st.st_dev && r.ino == st.st_ino)
      throw UsageError(r.path == t
                           ? fmt::format("{} is an input of this run: fp8sim never writes over its inputs", what)
                           : fmt::format("{} is '{}', an input of this run: fp8sim never writes over its inputs", what,
                                         r.path.string()));
}

std::string read_input_file(const fs::path& p, uint64_t max_bytes) {
  const std::string name = p.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the file type is checked first.
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  FP8SIM_REQUIRE(fd >= 0, "cannot open '{}': {}", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("'{}' is not a regular file ({}): fp8sim reads its JSON inputs from files", name,
                            S_ISDIR(st.st_mode)    ? "a folder"
                            : S_ISFIFO(st.st_mode) ? "a FIFO"
                            : S_ISCHR(st.st_mode)  ? "a character device"
                            : S_ISSOCK(st.st_mode) ? "a socket"
                                                   : "a special file"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw Error(fmt::format("'{}' is {} bytes, more than the {} MiB fp8sim reads from such a file", name,
                            static_cast<uint64_t>(st.st_size), max_bytes >> 20));
  }
  note_read(p, st);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      // The file may have grown since fstat: read on, within the cap.
      if (out.size() >= max_bytes) break;
      out.resize(std::min<uint64_t>(max_bytes + 1, out.size() + 65536));
    }
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw Error(fmt::format("cannot read '{}': {}", name, std::strerror(err)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  FP8SIM_REQUIRE(got <= max_bytes, "'{}' is more than the {} MiB fp8sim reads from such a file", name, max_bytes >> 20);
  return out;
}

}  // namespace fp8sim
