#include "sim/common/cleanup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include <fmt/format.h>

namespace fp8sim::cleanup {

namespace fs = std::filesystem;

namespace {

// The registry is plain fixed-size memory: the signal handler reads it without locks or
// allocation. A slot's state goes free (0) -> being filled (1) -> live (2) -> free.
constexpr int kPathSlots = 64;
constexpr int kChildSlots = 16;

struct PathSlot {
  std::atomic<int> state{0};
  PathKind kind = PathKind::File;
  char path[PATH_MAX];
};
PathSlot g_paths[kPathSlots];
std::atomic<pid_t> g_children[kChildSlots];
std::atomic<pid_t> g_owner{0};
std::atomic<int> g_handling{0};

const int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

// Removes `name` under the open folder `dirfd`, recursing into folders (at most `depth` levels),
// with async-signal-safe calls only (getdents64 instead of readdir, which may allocate).
void remove_at(int dirfd, const char* name, int depth) {
  if (::unlinkat(dirfd, name, 0) == 0 || (errno != EISDIR && errno != EPERM)) return;
  if (depth <= 0) return;
  const int fd = ::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  alignas(8) char buf[4096];
  // Entries removed while listing may shift what the next read returns: list again, a few times
  // at most (an entry that cannot be removed must not make this loop forever).
  for (int pass = 0; pass < 3; ++pass) {
    bool saw_any = false;
    ::lseek(fd, 0, SEEK_SET);
    for (;;) {
      const long n = ::syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0) break;
      for (long off = 0; off < n;) {
        struct Entry {
          uint64_t ino;
          int64_t off;
          unsigned short reclen;
          unsigned char type;
          char name[1];
        };
        const Entry* e = reinterpret_cast<const Entry*>(buf + off);
        off += e->reclen;
        if (std::strcmp(e->name, ".") == 0 || std::strcmp(e->name, "..") == 0) continue;
        remove_at(fd, e->name, depth - 1);
        saw_any = true;
      }
    }
    if (!saw_any) break;
  }
  ::close(fd);
  ::unlinkat(dirfd, name, AT_REMOVEDIR);
}

void on_signal(int sig) {
  const int saved_errno = errno;
  if (::getpid() == g_owner.load()) {
    if (g_handling.exchange(1) == 0) {
      for (auto& c : g_children) {
        const pid_t pid = c.load();
        if (pid > 0) ::kill(pid, SIGKILL);
      }
      for (auto& s : g_paths) {
        if (s.state.load() != 2) continue;
        if (s.kind == PathKind::Folder) remove_at(AT_FDCWD, s.path, 16);
        else if (s.kind == PathKind::File) ::unlink(s.path);
      }
      // Created folders last, once their temporaries are gone; nested ones need several passes.
      for (int pass = 0; pass < 8; ++pass) {
        bool removed = false;
        for (auto& s : g_paths)
          if (s.state.load() == 2 && s.kind == PathKind::EmptyFolder && ::rmdir(s.path) == 0) removed = true;
        if (!removed) break;
      }
    } else {
      // Another thread is cleaning up and ends the process when done.
      for (;;) ::pause();
    }
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  errno = saved_errno;
  ::_exit(128 + sig);
}

}  // namespace

void install_signal_handlers() {
  g_owner.store(::getpid());
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) sigaddset(&sa.sa_mask, s);
  for (int s : kSignals) {
    struct sigaction old {};
    ::sigaction(s, nullptr, &old);
    // A signal the caller chose to ignore (nohup, a shell's background job) stays ignored.
    if (old.sa_handler == SIG_IGN && s != SIGPIPE) continue;
    ::sigaction(s, &sa, nullptr);
  }
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  ::sigaction(SIGXFSZ, &ign, nullptr);
}

int remember_path(const fs::path& p, PathKind kind) {
  std::error_code ec;
  const std::string abs = p.is_absolute() ? p.string() : (fs::current_path(ec) / p).string();
  if (abs.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kPathSlots; ++i) {
    int expected = 0;
    if (!g_paths[i].state.compare_exchange_strong(expected, 1)) continue;
    g_paths[i].kind = kind;
    std::memcpy(g_paths[i].path, abs.c_str(), abs.size() + 1);
    g_paths[i].state.store(2);
    return i;
  }
  return -1;
}

void forget_path(int slot) {
  if (slot >= 0 && slot < kPathSlots) g_paths[slot].state.store(0);
}

int remember_child(pid_t pid) {
  for (int i = 0; i < kChildSlots; ++i) {
    pid_t expected = 0;
    if (g_children[i].compare_exchange_strong(expected, pid)) return i;
  }
  return -1;
}

void forget_child(int slot) {
  if (slot >= 0 && slot < kChildSlots) g_children[slot].store(0);
}

std::string temporary_name(const fs::path& target, const std::string& suffix) {
  std::string name = target.filename().string();
  if (name.empty()) name = target.parent_path().filename().string();
  return fmt::format(".{}.tmp.{}{}{}", name, ::getpid(), suffix.empty() ? "" : ".", suffix);
}

void remove_stale_temporaries(const fs::path& folder, const std::string& name) {
  const std::string prefix = "." + name + ".tmp.";
  std::error_code ec;
  fs::directory_iterator it(folder.empty() ? fs::path(".") : folder, ec);
  if (ec) return;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return;
    const std::string entry = it->path().filename().string();
    if (entry.compare(0, prefix.size(), prefix) != 0) continue;
    // The pid: the digits after the prefix, then the end of the name or a '.'.
    size_t i = prefix.size();
    long long pid = 0;
    while (i < entry.size() && entry[i] >= '0' && entry[i] <= '9' && pid < INT_MAX) pid = pid * 10 + (entry[i++] - '0');
    if (i == prefix.size() || pid <= 0 || pid >= INT_MAX || (i < entry.size() && entry[i] != '.')) continue;
    if (pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code ec2;
    const auto st = fs::symlink_status(it->path(), ec2);
    if (ec2) continue;
    if (fs::is_directory(st)) fs::remove_all(it->path(), ec2);
    else fs::remove(it->path(), ec2);
  }
}

}  // namespace fp8sim::cleanup
