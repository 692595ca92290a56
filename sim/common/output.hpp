#pragma once
// Output files: where a path leads, how it is written, and the set of files one run writes.
//
// Contract (docs/cli-contract.md has the whole of it):
//  - a regular file (or a path that does not exist yet) is written to a temporary beside it and
//    renamed over it, so readers see the old file or the complete new one, never a part; a
//    symbolic link is followed and its final target replaced, never the link;
//  - a character device, FIFO or socket is written in place (it is opened and written, never
//    replaced); "-" is standard output;
//  - a folder, a block device, a file where a parent folder should be, or an empty path is
//    refused; missing parent folders are created (and removed again when the run fails);
//  - RunFiles stages every output of one run and moves them into place only in commit(), after
//    the run's work succeeded: a run that fails leaves none of its outputs (streams are written
//    first in commit(), then the files are renamed). It refuses an output that is one of the
//    run's inputs (declared, or read: inputs_read()) or another of its outputs.
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp8sim {

struct OutputTarget {
  enum class Kind { File, Stream, Stdout };
  Kind kind = Kind::File;
  std::string what;             // how messages name it: "--json 'out.json'"
  std::filesystem::path path;   // File: the path that is replaced (links followed); Stream: as given
  bool exists = false;          // File: the target exists already (its mode is kept)
  bool missing_parent = false;  // File: its folder does not exist yet (the writer creates it)
  bool char_device = false;     // Stream: a character device (may be named by several outputs)
  dev_t dev = 0;
  ino_t ino = 0;
};

// Resolves `path` for writing; `option` names it in messages ("--json"; empty for a plain path).
// Throws UsageError for an empty path, Error for a folder, a block device, a parent that is not a
// folder or an unreadable link.
OutputTarget resolve_output(const std::string& option, const std::string& path);

// One output being written. File targets: a temporary beside the target (stale temporaries of
// dead processes there are removed first), renamed in commit(); the destructor removes it when
// commit() was not reached. Streams and standard output are written in place.
class AtomicFile {
 public:
  // Library use: resolves `target`. Missing parent folders are created (and kept).
  explicit AtomicFile(const std::filesystem::path& target);
  explicit AtomicFile(const OutputTarget& target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, size_t bytes);
  void write(std::string_view s) { write(s.data(), s.size()); }
  // Closes the temporary and renames it over the target (File), or closes the stream.
  void commit();
  const OutputTarget& target() const { return t_; }

 private:
  void open();
  OutputTarget t_;
  std::filesystem::path tmp_;
  int fd_ = -1;
  int slot_ = -1;
  bool committed_ = false;
};

// Writes `data` to p atomically (see AtomicFile). Creates the parent folder.
void write_file_atomic(const std::filesystem::path& p, std::string_view data);

// The outputs and inputs of one command run.
class RunFiles {
 public:
  RunFiles() = default;
  ~RunFiles();
  RunFiles(const RunFiles&) = delete;
  RunFiles& operator=(const RunFiles&) = delete;

  // A file the run reads ("-": standard input). Outputs may not be any of them.
  void input(const std::string& option, const std::string& path);
  // Declares an output and checks it now (so a bad path fails before any work); creates its
  // missing parent folders (removed again, while empty, unless commit() runs). "-" is standard
  // output: the human-readable text commands print there is then discarded. Returns its id.
  int output(const std::string& option, const std::string& path);
  // The content of output `id`. File targets are written to their temporary now; streams keep
  // the content (or the writer, which must stay valid until commit()) and are written in commit().
  void write(int id, std::string data);
  void write(int id, std::function<void(AtomicFile&)> writer);
  // Streaming writers: the AtomicFile of output `id`, opened now (a stream is written as the
  // data comes; only a File target stays invisible until commit()).
  AtomicFile& stream(int id);
  // Writes the streams, then renames every temporary into place.
  void commit();
  bool empty() const { return outs_.empty(); }

 private:
  struct In {
    std::string what;
    std::filesystem::path norm;
    bool exists = false, char_device = false;
    dev_t dev = 0;
    ino_t ino = 0;
  };
  struct Out {
    OutputTarget named;   // the output as given (the checks against other outputs use it)
    OutputTarget target;  // where it is written: `named`, or /dev/null on an MPI rank other than 0
    std::unique_ptr<AtomicFile> file;
    std::string data;
    std::function<void(AtomicFile&)> writer;
    bool has_content = false;
  };
  void create_parents(const OutputTarget& t);
  std::vector<In> ins_;
  std::vector<Out> outs_;
  std::vector<std::pair<std::filesystem::path, int>> created_;  // folders made for outputs, deepest first
  bool committed_ = false;
};

// Standard output as a data channel. After silence_stdout() the text printed to stdout goes to
// /dev/null and data for "-" goes to the original standard output (data_stdout_fd()).
void silence_stdout();
int data_stdout_fd();
bool stdout_silenced();
// Flushes stdout: "" when everything printed so far reached it, else why not ("cannot write to
// standard output: No space left on device"). RunFiles::commit checks it before writing anything,
// so a run whose tables were lost writes no files either.
std::string stdout_write_error();

// The files this process has read as inputs: every read_input_file, trace and tensor file (the
// readers note them). RunFiles::commit and a report's folder refuse to replace one, whether the
// command line named it or the run found it by name (a model, a registry recipe, the default
// calibration).
struct InputRead {
  std::filesystem::path path;  // absolute, as it was opened
  dev_t dev = 0;
  ino_t ino = 0;
};
void note_input_read(const std::filesystem::path& p);
std::vector<InputRead> inputs_read();
// Starts a new run's record (a process that runs several, the Python module, calls it before
// each): what an earlier run read is not this one's input.
void forget_inputs_read();
// While one is alive, this thread's reads are not recorded: a file read to be merged into (the
// run's own output) or read only to find out whether it is an input at all (a folder's other
// documents), which the reader then notes itself if it uses it.
class UnrecordedReads {
 public:
  UnrecordedReads();
  ~UnrecordedReads();
  UnrecordedReads(const UnrecordedReads&) = delete;
  UnrecordedReads& operator=(const UnrecordedReads&) = delete;
};
// Throws UsageError when `target`, an output about to be replaced (`what` names it in the
// message), is one of inputs_read().
void refuse_overwriting_input(const std::string& what, const std::filesystem::path& target);

// Reads a whole input file: it must be a regular file (a FIFO or device is refused before it is
// read, so nothing blocks or reads forever) of at most `max_bytes`. Errors name the file.
std::string read_input_file(const std::filesystem::path& p, uint64_t max_bytes);

}  // namespace fp8sim
