// The command that `colock exec` runs: started with fork + execvpe in the tool's own process
// group (so a terminal's Ctrl-C reaches it as it reaches the tool, as with flock(1)), reaped
// with waitpid.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace colock::cli {

/// Notes the file descriptors open when the tool starts (those it inherited), so that the
/// command gets those and none of the tool's own (its Redis socket among them). Call first
/// thing in main.
void note_inherited_fds();

struct spawned {
    pid_t pid = -1;
    /// errno of a failed execvp (the child has then been reaped already); 0 when the command
    /// runs.
    int exec_error = 0;
};

/// Starts `argv` (searched in PATH as execvp does) with the tool's environment, in which each
/// of `env` ("NAME=VALUE") replaces a variable of that NAME, and returns once it runs or its
/// exec failed, which the child reports through a close-on-exec pipe. `caught_signals` are the
/// signals whose handlers the tool installed: the child sets them back to their defaults before the
/// exec, with every signal blocked until then, so none reaches the tool's handlers from the
/// child. Throws std::system_error when the pipe or the fork fail.
spawned spawn_command(std::vector<std::string> const& argv, std::vector<int> const& caught_signals,
                      std::vector<std::string> const& env = {});

/// The wait status of `pid` when it has exited or been killed; nullopt while it runs. Throws
/// std::system_error when waitpid fails.
std::optional<int> try_reap(pid_t pid);

/// The status a shell reports for a wait status: the exit code, or 128 + N for signal N.
int exit_code_of(int wait_status);

/// True when `signal` was ignored when the tool started (nohup, or a background job of a
/// non-interactive shell for SIGINT): such a signal is neither caught nor forwarded, so the
/// command inherits it ignored.
bool ignored_at_start(int signal);

/// True when the tool's process group is the foreground one of its controlling terminal: a
/// SIGINT then came from the terminal, which sent it to the command as well.
bool in_terminal_foreground();

/// "SIGTERM", "SIGKILL", ..., else "signal N".
std::string signal_name(int signal);

} // namespace colock::cli
