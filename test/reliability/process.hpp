// A child process of the reliability runner: this same executable started in worker mode, with
// a pipe to its stdin (commands) and one from its stdout (events, one per line).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace colock::reliability {

/// The scenarios' one bounded wait for what a process, a journal or a server shows: asks
/// `done()` every `step` until it holds (then true) or `within` has passed (then false).
template <class Done>
bool wait_until(std::chrono::steady_clock::duration within, Done done,
                std::chrono::steady_clock::duration step = std::chrono::milliseconds(1)) {
    auto const until = std::chrono::steady_clock::now() + within;
    for (;;) {
        if (done())
            return true;
        if (std::chrono::steady_clock::now() >= until)
            return false;
        std::this_thread::sleep_for(step);
    }
}

class worker_process {
public:
    /// Starts `/proc/self/exe worker args...`. Its stderr goes to ours. Throws
    /// std::system_error when the process cannot be started.
    explicit worker_process(std::vector<std::string> const& args);
    /// Kills the process if it still runs (SIGCONT first, in case it was stopped) and reaps it.
    ~worker_process();
    worker_process(worker_process const&) = delete;
    worker_process& operator=(worker_process const&) = delete;

    int pid() const noexcept { return pid_; }

    /// Writes one line to the worker's stdin.
    void send(std::string const& line);
    /// The next line of output that starts with `prefix` (lines before it are dropped), or
    /// nothing when none came within `limit` or the worker closed its output.
    std::optional<std::string> wait_line(std::string const& prefix,
                                         std::chrono::milliseconds limit);
    /// Waits for the worker to exit; its exit status (the exit code, or 128 + signal), or
    /// nothing when it still runs after `limit`.
    std::optional<int> wait_exit(std::chrono::milliseconds limit);
    /// Every line the worker printed so far.
    std::vector<std::string> lines() const;

    void stop_process() const;     // SIGSTOP
    void continue_process() const; // SIGCONT
    void kill_process() const;     // SIGKILL: the process dies with no chance to clean up

private:
    void read_output();

    int pid_ = -1;
    int stdin_fd_ = -1;
    int stdout_fd_ = -1;
    std::optional<int> status_;
    std::thread reader_;
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<std::string> lines_;
    std::size_t consumed_ = 0; // lines already looked at by wait_line
    bool output_closed_ = false;
};

} // namespace colock::reliability
