#include "process.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>

extern char** environ;

namespace colock::reliability {

namespace {

[[noreturn]] void throw_errno(char const* what, int err = errno) {
    throw std::system_error(err, std::generic_category(), what);
}

int exit_status(int raw) {
    if (WIFEXITED(raw))
        return WEXITSTATUS(raw);
    if (WIFSIGNALED(raw))
        return 128 + WTERMSIG(raw);
    return -1;
}

} // namespace

worker_process::worker_process(std::vector<std::string> const& args) {
    int in[2];
    int out[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        throw_errno("pipe");
    if (pipe2(out, O_CLOEXEC) != 0) {
        int const err = errno;
        close(in[0]);
        close(in[1]);
        throw_errno("pipe", err);
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);

    std::vector<std::string> argv_storage;
    argv_storage.push_back("/proc/self/exe");
    argv_storage.push_back("worker");
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_storage)
        argv.push_back(a.data());
    argv.push_back(nullptr);

    int const rc = posix_spawn(&pid_, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
        close(in[1]);
        close(out[0]);
        throw_errno("posix_spawn of a worker", rc);
    }
    stdin_fd_ = in[1];
    stdout_fd_ = out[0];
    reader_ = std::thread([this] { read_output(); });
}

worker_process::~worker_process() {
    if (stdin_fd_ >= 0)
        close(stdin_fd_);
    if (!status_ && pid_ > 0) {
        kill(pid_, SIGCONT);
        kill(pid_, SIGKILL);
        int raw = 0;
        while (waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
        }
    }
    if (reader_.joinable())
        reader_.join();
    if (stdout_fd_ >= 0)
        close(stdout_fd_);
}

void worker_process::read_output() {
    std::string partial;
    char buf[4096];
    for (;;) {
        ssize_t const n = read(stdout_fd_, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        partial.append(buf, static_cast<std::size_t>(n));
        std::size_t start = 0;
        std::lock_guard lock(mutex_);
        for (std::size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1)
            lines_.push_back(partial.substr(start, nl - start));
        partial.erase(0, start);
        changed_.notify_all();
    }
    std::lock_guard lock(mutex_);
    output_closed_ = true;
    changed_.notify_all();
}

void worker_process::send(std::string const& line) {
    std::string const text = line + "\n";
    std::size_t done = 0;
    while (done < text.size()) {
        ssize_t const n = write(stdin_fd_, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throw_errno("writing to a worker");
        done += static_cast<std::size_t>(n);
    }
}

std::optional<std::string> worker_process::wait_line(std::string const& prefix,
                                                     std::chrono::milliseconds limit) {
    auto const until = std::chrono::steady_clock::now() + limit;
    std::unique_lock lock(mutex_);
    for (;;) {
        for (; consumed_ < lines_.size(); ++consumed_)
            if (lines_[consumed_].rfind(prefix, 0) == 0)
                return lines_[consumed_++];
        if (output_closed_)
            return std::nullopt;
        if (changed_.wait_until(lock, until) == std::cv_status::timeout &&
            consumed_ == lines_.size())
            return std::nullopt;
    }
}

std::optional<int> worker_process::wait_exit(std::chrono::milliseconds limit) {
    if (status_)
        return status_;
    wait_until(
        limit,
        [&] {
            int raw = 0;
            pid_t const r = waitpid(pid_, &raw, WNOHANG);
            if (r == pid_)
                status_ = exit_status(raw);
            else if (r < 0 && errno != EINTR)
                throw_errno("waitpid");
            return status_.has_value();
        },
        std::chrono::milliseconds(10));
    return status_;
}

std::vector<std::string> worker_process::lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
}

void worker_process::stop_process() const {
    kill(pid_, SIGSTOP);
}

void worker_process::continue_process() const {
    kill(pid_, SIGCONT);
}

void worker_process::kill_process() const {
    kill(pid_, SIGKILL);
}

} // namespace colock::reliability
