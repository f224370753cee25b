#include "child_process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <system_error>

namespace colock::cli {

namespace {

// The descriptors open at start; nullopt when /proc/self/fd could not be read.
std::optional<std::vector<int>>& inherited_fds() {
    static std::optional<std::vector<int>> fds;
    return fds;
}

std::optional<std::vector<int>> open_fds() {
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr)
        return std::nullopt;
    std::vector<int> fds;
    int const own = dirfd(dir);
    while (dirent const* entry = readdir(dir)) {
        char* end = nullptr;
        long const fd = std::strtol(entry->d_name, &end, 10);
        if (end != entry->d_name && *end == '\0' && fd != own && fd >= 0 && fd <= 1L << 30)
            fds.push_back(static_cast<int>(fd));
    }
    closedir(dir);
    std::sort(fds.begin(), fds.end());
    return fds;
}

// The tool's own descriptors that an exec would pass on: opened since start, without
// FD_CLOEXEC (Asio opens its sockets without it). The child closes them.
std::vector<int> own_inheritable_fds() {
    auto const& start = inherited_fds();
    auto now = open_fds();
    std::vector<int> out;
    if (!start || !now)
        return out;
    for (int fd : *now) {
        if (fd <= 2 || std::binary_search(start->begin(), start->end(), fd))
            continue;
        int const flags = fcntl(fd, F_GETFD);
        if (flags >= 0 && (flags & FD_CLOEXEC) == 0)
            out.push_back(fd);
    }
    return out;
}

[[noreturn]] void throw_errno(int err, char const* what) {
    throw std::system_error(err, std::generic_category(), what);
}

} // namespace

void note_inherited_fds() {
    inherited_fds() = open_fds();
}

spawned spawn_command(std::vector<std::string> const& argv, std::vector<int> const& caught_signals,
                      std::vector<std::string> const& env) {
    // Everything the child needs is prepared here: between fork and exec it only makes
    // async-signal-safe calls.
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    cargv.reserve(args.size() + 1);
    for (auto& a : args)
        cargv.push_back(a.data());
    cargv.push_back(nullptr);
    std::vector<std::string> vars = env;
    std::vector<char*> cenv;
    for (char** e = environ; *e != nullptr; ++e) {
        std::string_view const var{*e};
        auto const replaced = [&var](std::string const& v) {
            auto const eq = v.find('=');
            return var.size() > eq &&
                   var.substr(0, eq + 1) == std::string_view{v}.substr(0, eq + 1);
        };
        if (std::none_of(vars.begin(), vars.end(), replaced))
            cenv.push_back(*e);
    }
    for (auto& v : vars)
        cenv.push_back(v.data());
    cenv.push_back(nullptr);
    auto const to_close = own_inheritable_fds();

    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0)
        throw_errno(errno, "pipe2");

    sigset_t all;
    sigset_t before;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &before);
    pid_t const pid = fork();
    if (pid == 0) {
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        for (int sig : caught_signals)
            sigaction(sig, &dfl, nullptr);
        for (int fd : to_close)
            if (fd != report[1])
                close(fd);
        pthread_sigmask(SIG_SETMASK, &before, nullptr);
        execvpe(cargv[0], cargv.data(), cenv.data());
        int const err = errno;
        while (write(report[1], &err, sizeof err) < 0 && errno == EINTR) {
        }
        _exit(err == ENOENT ? 127 : 126);
    }
    int const fork_error = errno;
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    close(report[1]);
    if (pid < 0) {
        close(report[0]);
        throw_errno(fork_error, "fork");
    }

    // EOF: the exec closed the pipe. An int: the exec failed, with that errno.
    int err = 0;
    ssize_t n = 0;
    do {
        n = read(report[0], &err, sizeof err);
    } while (n < 0 && errno == EINTR);
    close(report[0]);
    if (n != static_cast<ssize_t>(sizeof err))
        return {pid, 0};
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return {pid, err != 0 ? err : EINVAL};
}

std::optional<int> try_reap(pid_t pid) {
    for (;;) {
        int status = 0;
        pid_t const r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r == 0)
            return std::nullopt;
        if (errno != EINTR)
            throw_errno(errno, "waitpid");
    }
}

int exit_code_of(int wait_status) {
    if (WIFEXITED(wait_status))
        return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status))
        return 128 + WTERMSIG(wait_status);
    return 128;
}

bool ignored_at_start(int signal) {
    struct sigaction current {};
    return sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_IGN;
}

bool in_terminal_foreground() {
    int const tty = open("/dev/tty", O_RDONLY | O_NOCTTY | O_CLOEXEC);
    if (tty < 0)
        return false;
    bool const foreground = tcgetpgrp(tty) == getpgrp();
    close(tty);
    return foreground;
}

std::string signal_name(int signal) {
    if (char const* abbrev = sigabbrev_np(signal))
        return std::string("SIG") + abbrev;
    return "signal " + std::to_string(signal);
}

} // namespace colock::cli
