// nvcc/launcher_impl.h — one run of the nvcc launcher (launcher.cpp): the
// lookup, the compile and what it stores, the preprocessed text, the
// manifest record, explain. Its rooms: launcher.cpp (run, serve),
// launcher_preprocess.cpp, launcher_record.cpp, launcher_compile.cpp,
// launcher_explain.cpp. Not public API.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "compile/include_lexer.h"
#include "compile/scan_files.h"
#include "nvcc/counters_file.h"
#include "nvcc/manifest.h"
#include "nvcc/nvcc_command.h"
#include "nvcc/places.h"
#include "nvcc/relocation.h"
#include "progcache/file_store.h"
#include "progcache/key.h"
#include "progcache/lock_file.h"
#include "progcache/status.h"

namespace progcache::nvcc {

// How one run of the launcher ends: with an exit status (a hit served,
// nvcc's own status after a compile, explain's answer), or with nvcc run
// unchanged in this process's place, which the entry point does once the
// run is over (its lock released, its store closed).
struct Outcome {
  bool run_nvcc = false;
  int status = 0;
  static Outcome exit(int status) { return {false, status}; }
  static Outcome unchanged() { return {true, 0}; }
};

class Launcher {
 public:
  // `explain`: say what the command would do (a hit, or why not) and run,
  // write and count nothing.
  Launcher(std::string nvcc, std::vector<std::string> args, bool explain = false)
      : m_nvcc(std::move(nvcc)), m_args(std::move(args)), m_explain(explain) {}

  Outcome run();

 private:
  // Single flight across processes: identical commands (one manifest key)
  // started together compile once, and the others are served what it
  // stored. The lock (lock_file.h) is the kernel's: a holder that dies
  // drops it. The wait is bounded (PROGCACHE_LOCK_TIMEOUT); a lock that
  // cannot be taken costs the wait at most, never the build. A waiter that
  // then finds no result (the first compile's was not stored) compiles at
  // once, without the lock: waiting in turn would run identical compiles
  // one after another.
  std::optional<int> wait_for_another(std::chrono::milliseconds timeout, bool group);

  // The stored result, written out: 0, or nullopt for a miss. The
  // command's own key first, then (under a base directory) the relocated
  // one.
  std::optional<int> serve();

  // A result found by the relocated key: its pointer entry names the
  // result a compile in another checkout stored (which printed nothing),
  // and holds its dependency file as a template, written here for this
  // working directory.
  std::optional<int> serve_relocated(const progcache::Key& k);

  // Why nvcc would fail to write what a hit writes, or nullopt. An output
  // nvcc could not write (a file it may not write, a missing directory) is
  // nvcc's to report: a hit must not succeed where the compile would fail,
  // nor replace a file the user protected.
  std::optional<std::string> unwritable() const;

  // The result under `rkey`, written out: 0, or nullopt when it is not
  // there or cannot be written (then the next result, or a compile).
  std::optional<int> serve_result(const progcache::Key& rkey, bool count_hit = true);

  // Writes a result's output and dependency file, and replays what the
  // compile printed (`printed`, if given): false when they cannot be
  // written (then nothing was replaced).
  bool write_result(std::string_view output, const std::optional<std::string_view>& depfile,
                    const progcache::Entry* printed);

  // A direct miss. The compile's preprocessed text is looked up too, as
  // ccache's preprocessor mode does: a comment edit, or a header rewritten
  // with the same text, leaves it as it was, and the result it led to is
  // served (once the command has a manifest: before, no result of it can
  // be stored under its text). Without a manifest the text is computed
  // beside the compile, for the next lookup. Only for the toolkit's own
  // nvcc.
  Outcome miss();

  // What the preprocessing steps nvcc would run made of the files now: the
  // key of that text (under the manifest key) and the files they read.
  struct Preprocessed {
    progcache::Key key;
    std::vector<std::string> deps;
    std::map<std::string, progcache::detail::FileStamp> stamps;  // of each file read, once the steps were done
    // A step printed (#warning, a redefined macro, an #endif with words
    // after it): the text does not hold what nvcc would print, so no result
    // is found or recorded by it. Its list of files stands.
    bool printed = false;
    // The preprocessor's own word on line markers: its output names a file
    // (by a line marker) that no dependency list holds, so a #line
    // directive or a line marker in some file named it, whatever spelling
    // hid it from the lexer.
    bool names_unread_file = false;
    // Under a base directory: a text names a path under it (text_names_place).
    bool names_place = false;
  };

  // Runs `nvcc --dryrun` and each host compiler -E step it lists, as nvcc
  // would (its variables set), into temporary files; nullopt when any of it
  // fails or cannot be read with certainty (then only the direct key is
  // used). Every file read must be unchanged since `start`.
  std::optional<Preprocessed> preprocess(std::int64_t start);

  // Whether what the stored result `entry` printed is what nvcc would print
  // for the files read now (`now`). The text is the same, so every line
  // number, column and message is; but a diagnostic quotes source lines,
  // read from the files it names. So every file whose bytes differ from
  // those the stored compile read (its manifest record) must go unnamed in
  // what it printed (by file name, anywhere in it).
  bool replayable(const progcache::Entry& entry, const progcache::Key& rkey, const ManifestRecord& now) const;

  // The result the preprocessed text led to, served, and recorded in the
  // manifest under the files read now (the next lookup is a direct hit);
  // nullopt for a miss. A result that printed is served this way only when
  // what it printed names no file that changed (replayable).
  std::optional<int> serve_preprocessed(const Preprocessed& pre, std::int64_t start);

  // What a compile read, as a manifest record (its result key not yet
  // set), or why it cannot be recorded: a file changed since `start`, a
  // probe through a macro, a file whose text the key cannot hold.
  std::variant<ManifestRecord, std::string> build_record(const std::vector<std::string>& deps, std::int64_t start);

  // What a device link reads whole: its inputs, and for each library (-l,
  // and nvcc's own cudadevrt) every lib<NAME>.so and lib<NAME>.a in the
  // directories nvlink searches (-L, the toolkit's lib/stubs and lib,
  // LIBRARY_PATH's). Every one there is keyed by its contents and every
  // other place must stay absent, whichever order nvlink takes them in.
  std::variant<std::vector<std::string>, std::string> link_files(Places& places, const std::string& bin) const;

  // The directories whose headers are the toolkit's (beside nvcc) and the
  // host compiler's own (`system`), resolved.
  std::vector<std::string> trusted_roots(const std::vector<std::string>& system) const;

  // Why what a file the compile read says keeps its result from being
  // stored, or nullopt. Device line information names a file by the
  // working directory joined to the name a #line directive (or a line
  // marker) gives: when the place is not keyed, such a name may be
  // relative. A #line naming a file: that file is read too (a diagnostic
  // quotes it, -src-in-ptx copies it) and is not in the dependency list. A
  // pragma naming a file (#pragma GCC dependency) warns by that file's time.
  // `facts` are the text's line facts, as the include lexer read them.
  std::optional<std::string> judge_text(const std::string& text, const progcache::detail::LineFacts& facts);

  // A #line directive or a line marker was read: what it keeps from being
  // stored (the result is not replayed by its text when it printed).
  std::optional<std::string> line_directive_read();

  // Runs nvcc (files unchanged since `start` are what it reads) and stores
  // what it made: the result under the files it read, the manifest, and,
  // with `pre` (or the text computed `beside` it), the preprocessed text's
  // pointer to the result.
  Outcome compile(std::int64_t start, std::optional<Preprocessed> pre, std::thread* beside = nullptr,
                  std::optional<Preprocessed>* beside_result = nullptr);

  // Which directory each search directory of the command (the source's
  // own, -I, -isystem, the environment's) is: renaming another directory
  // into place changes it, and no file's own times show that.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> search_dir_identities() const;

  // Whether the preprocessing steps read the very files `record` holds:
  // the same paths, each the same file (device, inode) with the same
  // stamp. Anything else (a header created, a directory renamed, a link
  // retargeted between the steps and nvcc) and the text does not vouch for
  // the record.
  static bool reads_the_same(const Preprocessed& pre, const ManifestRecord& record);

  // The result `m` (just stored, its output naming no path: the
  // preprocessed texts nvcc compiled name none, nothing was printed) under
  // the relocated key too: a record with the checkout's paths relative,
  // pointing at the result, with the dependency file as a template.
  std::optional<std::string> store_relocated(const ManifestRecord& m, const std::optional<std::string>& dep_template);

  // Adds `record` to the manifest under `mkey` as the store holds it now.
  progcache::Status put_manifest(const progcache::Key& mkey, const ManifestRecord& record);

  // The manifest this compile's result joins: the store's as it is now
  // (another process may have added a result while nvcc ran), or none. One
  // that cannot be read is replaced.
  std::optional<Manifest> merge_base(const progcache::Key& mkey);

  // nvcc succeeded; its result is simply not kept.
  Outcome not_stored(const std::string& why);

  // nvcc is to run unchanged: counted with why (explaining: said).
  Outcome uncacheable(const std::string& why);

  // A file the command names (options and response files, -include): read
  // without blocking, regular files only; its stat kept, so that an edit
  // while nvcc runs keeps the result out of the store.
  progcache::Result<std::string> read_input(const std::string& path);

  // The directories a file read is found under, resolved: the chain, the
  // source's, the working directory, the library directories.
  std::vector<std::string> tops_of(const std::vector<std::string>& chain) const;

  // Whether a file the command names changed since it was read for the key.
  bool named_input_changed() const;

  // `progcache explain nvcc ...`: whether the command would be served, and
  // on a miss, for each result the command's manifest holds (newest first),
  // the first file or place that is not as it was. The preprocessed text is
  // not computed (that runs the preprocessor): a direct miss may still be
  // served by it.
  int explain();

  // One line of `explain`, naming the source: returns `code`.
  int said(int code, const std::string& what) const;

  std::string m_nvcc;
  std::string m_bin;  // nvcc's directory, links resolved
  std::vector<std::string> m_variables;
  std::vector<std::string> m_args;
  Command m_cmd;
  std::string m_root;
  StatsFile m_stats;
  std::map<std::string, progcache::detail::FileStamp> m_inputs_read;
  std::map<std::string, progcache::detail::FileStamp> m_link_inputs_before;  // a device link's inputs, before nvcc ran
  std::unique_ptr<progcache::FileStore> m_store;
  progcache::Key m_mkey;
  bool m_place_keyed = false;                                            // the working directory is in the key
  std::vector<std::pair<std::uint64_t, std::uint64_t>> m_dirs_at_start;  // search_dir_identities() at the start
  bool m_toolkit_nvcc = false;                    // nvcc.profile beside it: the toolkit's own nvcc, not a wrapper
  bool m_had_manifest = false;                    // the command's manifest was read (a result of it was stored)
  std::optional<Manifest> m_manifest;             // as the direct lookup read it
  std::optional<Relocation> m_reloc;              // under a base directory (relocation_for)
  bool m_base_set = false;                        // PROGCACHE_BASE_DIR is set
  std::string m_not_relocated;                    // why a compile's result is not under the relocated key
  std::optional<progcache::Key> m_relocated_key;  // the command's key with the checkout's paths relative
  bool m_line_directive = false;                  // a file read holds a #line directive (build_record)
  std::vector<std::string> m_absolute_operands;   // headers included by absolute path (build_record)
  std::optional<progcache::LockFile> m_lock;      // held from a miss to the store of its result
  bool m_explain = false;                         // say what would happen; run, write and count nothing
  progcache::FileStoreOptions m_store_options;    // explain's: where the store is, and how entries are checked
};

}  // namespace progcache::nvcc
