#pragma once
// What an interrupted run must undo: the temporary files and folders it created and the child
// processes it started. Everything that creates a temporary or starts a child registers it here
// for as long as it exists; fp8sim's main() installs the signal handlers.
//
// On SIGINT, SIGTERM, SIGHUP or SIGPIPE the handler kills the registered children (SIGKILL),
// removes the registered temporaries, restores the signal's default action and raises it again,
// so the process ends the conventional way (a shell reports 128 + the signal number). SIGXFSZ is
// ignored instead: a write over the file-size limit then fails with EFBIG and takes the ordinary
// error path, which removes the temporaries as well. A process forked from a registered owner
// never cleans up the owner's files: in a child the handlers take the default action.
//
// Temporaries are named ".<target name>.tmp.<pid>[.<suffix>]" beside their target, so a later run
// can find and remove those of processes that no longer exist (remove_stale_temporaries).
#include <sys/types.h>

#include <filesystem>
#include <string>

namespace fp8sim::cleanup {

// Installs the handlers and makes the calling process the owner of the registry. Idempotent.
void install_signal_handlers();

// What a registered path is: a file, a folder removed with its contents (a report being
// staged), or a folder the run created for its outputs, removed only while it is empty.
enum class PathKind { File, Folder, EmptyFolder };

// Registers a temporary for removal on a signal. Returns a slot for forget_path(); -1 when the
// table is full (the temporary then still works, it is only not removed on a signal).
int remember_path(const std::filesystem::path& p, PathKind kind);
void forget_path(int slot);

// Registers a child process to kill on a signal. Returns a slot for forget_child(); -1 when full.
int remember_child(pid_t pid);
void forget_child(int slot);

// The name of a temporary for `target` owned by this process: ".<name>.tmp.<pid>" plus
// ".<suffix>" when a suffix is given.
std::string temporary_name(const std::filesystem::path& target, const std::string& suffix = "");

// Removes, in `folder`, the temporaries of `name` (".<name>.tmp.<pid>" and ".<name>.tmp.<pid>.*")
// whose process no longer exists. Never follows links; ignores every error (best effort).
void remove_stale_temporaries(const std::filesystem::path& folder, const std::string& name);

}  // namespace fp8sim::cleanup
