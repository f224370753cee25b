#include <colock_test/redis_server.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace colock::test {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

[[noreturn]] void fail(std::string const& what) {
    throw std::runtime_error("redis_server: " + what);
}

[[noreturn]] void fail_errno(std::string const& what) {
    fail(what + ": " + std::strerror(errno));
}

std::string env_or(char const* name, char const* fallback) {
    char const* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : fallback;
}

std::string redis_server_exe() {
    return env_or("COLOCK_REDIS_SERVER", "redis-server");
}
std::string redis_sentinel_exe() {
    return env_or("COLOCK_REDIS_SENTINEL", "redis-sentinel");
}
std::string redis_cli_exe() {
    return env_or("COLOCK_REDIS_CLI", "redis-cli");
}

std::string join(std::vector<std::string> const& argv) {
    std::string s;
    for (auto const& a : argv) {
        if (!s.empty())
            s += ' ';
        bool const plain = !a.empty() && a.find_first_of(" \t\n\"'") == std::string::npos;
        s += plain ? a : '"' + a + '"';
    }
    return s;
}

/// A file descriptor closed on scope exit.
class unique_fd {
public:
    unique_fd() = default;
    explicit unique_fd(int fd) : fd_(fd) {}
    unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& o) noexcept {
        reset(std::exchange(o.fd_, -1));
        return *this;
    }
    ~unique_fd() { reset(); }
    int get() const noexcept { return fd_; }
    void reset(int fd = -1) noexcept {
        if (fd_ >= 0)
            ::close(fd_);
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

/// posix_spawn's attribute and file-action objects, destroyed on scope exit.
struct spawn_setup {
    posix_spawnattr_t attr{};
    posix_spawn_file_actions_t actions{};

    spawn_setup() {
        posix_spawnattr_init(&attr);
        posix_spawn_file_actions_init(&actions);
        // The child starts with default signal handling and nothing blocked, whatever the test
        // process did with its own signals.
        sigset_t all;
        sigset_t none;
        sigfillset(&all);
        sigemptyset(&none);
        posix_spawnattr_setsigdefault(&attr, &all);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    }
    ~spawn_setup() {
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
    }
    spawn_setup(spawn_setup const&) = delete;
    spawn_setup& operator=(spawn_setup const&) = delete;

    /// The child gets no descriptor of ours beyond 0-2: a test's client socket inherited by a
    /// server would stay open there after the test closed it.
    void close_the_rest() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
        posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
    }
};

/// Starts argv[0] (looked up in PATH) without a shell. Returns the child's pid.
pid_t spawn(std::vector<std::string> const& argv, spawn_setup& setup) {
    std::vector<char*> cargv;
    cargv.reserve(argv.size() + 1);
    for (auto const& a : argv)
        cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    setup.close_the_rest();
    pid_t pid = -1;
    int const rc = posix_spawnp(&pid, cargv[0], &setup.actions, &setup.attr, cargv.data(), environ);
    if (rc != 0)
        fail("cannot run " + argv[0] + ": " + std::strerror(rc));
    return pid;
}

int wait_exit_status(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            fail_errno("waitpid");
    }
    return status;
}

std::string describe_status(int status) {
    if (WIFEXITED(status))
        return "exit status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return "killed by signal " + std::to_string(WTERMSIG(status));
    return "status " + std::to_string(status);
}

/// Where `name` is found in PATH (or `name` itself when it has a slash); empty if nowhere.
std::string find_in_path(std::string const& name) {
    if (name.find('/') != std::string::npos)
        return name;
    std::string const path = env_or("PATH", "/usr/local/bin:/usr/bin:/bin");
    std::size_t begin = 0;
    for (;;) {
        std::size_t const end = std::min(path.find(':', begin), path.size());
        std::string dir = path.substr(begin, end - begin);
        std::string const candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0)
            return candidate;
        if (end == path.size())
            return {};
        begin = end + 1;
    }
}

/// Runs jobs on one thread that lives as long as the process. A server is forked from this
/// thread and asks the kernel for SIGKILL when its parent dies (PR_SET_PDEATHSIG): that signal
/// comes when the *thread* that forked exits, so it must be a thread that never exits early.
/// The result: a test binary that crashes, or is killed by ctest's timeout, leaves no
/// redis-server behind.
class spawner_thread {
public:
    static spawner_thread& instance() {
        // Never destroyed: the thread may still wait on the mutex while the process exits.
        static auto* const self = new spawner_thread;
        return *self;
    }

    void run(std::function<void()> const& job) {
        std::lock_guard caller_lock{caller_mutex_};
        std::unique_lock lock{mutex_};
        job_ = &job;
        cv_.notify_all();
        cv_.wait(lock, [&] { return job_ == nullptr; });
    }

private:
    spawner_thread() {
        std::thread([this] {
            std::unique_lock lock{mutex_};
            for (;;) {
                cv_.wait(lock, [&] { return job_ != nullptr; });
                (*job_)();
                job_ = nullptr;
                cv_.notify_all();
            }
        }).detach();
    }

    std::mutex caller_mutex_;
    std::mutex mutex_;
    std::condition_variable cv_;
    std::function<void()> const* job_ = nullptr;
};

/// Starts a redis-server: stdin from /dev/null, stdout and stderr appended to `out_path`, no
/// other descriptor of ours, default signal handling, killed when this process dies.
pid_t spawn_server(std::vector<std::string> const& argv, std::string const& out_path) {
    std::string const exe = find_in_path(argv.at(0));
    if (exe.empty())
        fail(argv[0] + " not found in PATH (install redis-server, or set COLOCK_REDIS_SERVER)");
    std::vector<char*> cargv;
    for (auto const& a : argv)
        cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);

    unique_fd null_fd{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
    unique_fd out_fd{::open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)};
    if (null_fd.get() < 0 || out_fd.get() < 0)
        fail_errno("cannot open " + out_path);
    pid_t const parent = ::getpid();

    pid_t child = -1;
    int fork_errno = 0;
    spawner_thread::instance().run([&] {
        child = ::fork();
        if (child == 0) {
            // The child of a multi-threaded process: only async-signal-safe calls until exec.
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (::getppid() != parent)
                ::_exit(127); // the parent died before prctl took effect
            ::dup2(null_fd.get(), 0);
            ::dup2(out_fd.get(), 1);
            ::dup2(out_fd.get(), 2);
            if (::close_range(3, ~0U, 0) != 0) {
                for (int fd = 3; fd < 65536; ++fd)
                    ::close(fd);
            }
            struct sigaction dfl {};
            dfl.sa_handler = SIG_DFL;
            for (int sig = 1; sig < NSIG; ++sig)
                ::sigaction(sig, &dfl, nullptr);
            sigset_t none;
            sigemptyset(&none);
            ::sigprocmask(SIG_SETMASK, &none, nullptr);
            ::execve(exe.c_str(), cargv.data(), environ);
            ::_exit(127);
        }
        if (child < 0)
            fork_errno = errno;
    });
    if (child < 0) {
        errno = fork_errno;
        fail_errno("fork");
    }
    return child;
}

struct run_result {
    int status = 0;
    std::string out;
    std::string err;
    bool ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

/// Runs a program to completion with stdin from /dev/null, collecting stdout and stderr.
run_result run(std::vector<std::string> const& argv) {
    int out_pipe[2];
    int err_pipe[2];
    // Close-on-exec, so a process spawned concurrently by another thread cannot inherit our
    // pipe ends and keep them open (the reader would never see end-of-file).
    if (::pipe2(out_pipe, O_CLOEXEC) != 0)
        fail_errno("pipe2");
    unique_fd out_r{out_pipe[0]}, out_w{out_pipe[1]};
    if (::pipe2(err_pipe, O_CLOEXEC) != 0)
        fail_errno("pipe2");
    unique_fd err_r{err_pipe[0]}, err_w{err_pipe[1]};

    spawn_setup setup;
    posix_spawn_file_actions_addopen(&setup.actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&setup.actions, out_w.get(), 1);
    posix_spawn_file_actions_adddup2(&setup.actions, err_w.get(), 2);
    pid_t const pid = spawn(argv, setup);
    out_w.reset();
    err_w.reset();

    run_result r;
    pollfd fds[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
    std::string* sinks[2] = {&r.out, &r.err};
    int open_count = 2;
    char buf[4096];
    // A command that hangs (redis-cli against a paused server) must not hang the test.
    auto const deadline = clock_type::now() + 30s;
    while (open_count > 0) {
        auto const left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
        if (left <= 0ms) {
            ::kill(pid, SIGKILL);
            wait_exit_status(pid);
            fail(join(argv) + " did not finish within 30 s");
        }
        int const ready = ::poll(fds, 2, static_cast<int>(left.count()));
        if (ready == 0)
            continue;
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            fail_errno("poll");
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || fds[i].revents == 0)
                continue;
            ssize_t const n = ::read(fds[i].fd, buf, sizeof buf);
            if (n > 0) {
                sinks[i]->append(buf, static_cast<std::size_t>(n));
            } else if (n == 0 || errno != EINTR) {
                fds[i].fd = -1;
                --open_count;
            }
        }
    }
    r.status = wait_exit_status(pid);
    return r;
}

std::string read_file_from(std::string const& path, std::streamoff offset = 0) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        return {};
    in.seekg(offset);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::streamoff file_size_or_zero(std::string const& path) {
    std::error_code ec;
    auto const size = std::filesystem::file_size(path, ec);
    return ec ? 0 : static_cast<std::streamoff>(size);
}

std::string last_lines(std::string const& text, std::size_t lines) {
    std::size_t pos = text.size();
    if (pos > 0 && text[pos - 1] == '\n')
        --pos;
    for (std::size_t seen = 0; pos > 0; --pos) {
        if (text[pos - 1] == '\n' && ++seen == lines)
            break;
    }
    return text.substr(pos);
}

/// True when nothing uses `port` on 127.0.0.1 now. No SO_REUSEADDR: a port with connections in
/// TIME_WAIT counts as used, which keeps us clear of a recently used one.
bool port_is_free(std::uint16_t port) {
    unique_fd s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
    if (s.get() < 0)
        return false;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return ::bind(s.get(), reinterpret_cast<sockaddr const*>(&addr), sizeof addr) == 0;
}

/// A free port below the ephemeral range (where the kernel picks the local ports of outgoing
/// connections), so that while our server is down no client can get that port, or connect to
/// itself through it.
std::uint16_t pick_port(std::uint16_t avoid = 0) {
    int low = 32768;
    int high = 60999;
    {
        std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
        range >> low >> high;
    }
    int first = 10000;
    int last = low - 1;
    if (last - first < 1000) { // an unusual range: use the ports above it instead
        first = high + 1;
        last = 65535;
    }
    thread_local std::mt19937 rng{std::random_device{}()};
    std::uniform_int_distribution<int> dist(first, last);
    for (int i = 0; i < 200; ++i) {
        auto const p = static_cast<std::uint16_t>(dist(rng));
        if (p != avoid && port_is_free(p))
            return p;
    }
    fail("no free port found in " + std::to_string(first) + "-" + std::to_string(last));
}

std::string percent_encode(std::string_view s) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        bool const unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                                c == '~';
        if (unreserved) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

} // namespace

redis_server::redis_server(redis_server_options opts) : opts_(std::move(opts)) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "colock-redis-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
        fail_errno("mkdtemp " + tmpl);
    dir_ = tmpl;
    try {
        if (opts_.tls && opts_.tls_files_from.empty())
            make_tls_files();
        else if (opts_.tls)
            ca_file_ = opts_.tls_files_from + "/ca.crt";
        if (!opts_.sentinel_master_name.empty()) {
            std::ofstream conf(dir_ + "/sentinel.conf");
            conf << "# written by the colock test fixture; the sentinel rewrites it\n";
            if (!conf)
                fail("cannot write " + dir_ + "/sentinel.conf");
        }
        // Another process may take the port between our check and the server's bind: then
        // try another one.
        for (int attempt = 0;; ++attempt) {
            port_ = pick_port();
            if (opts_.tls)
                tls_port_ = pick_port(port_);
            if (try_start())
                return;
            if (attempt == 20)
                fail("could not bind a free port after 20 attempts; log:\n" + log_tail());
        }
    } catch (...) {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
        throw;
    }
}

redis_server::~redis_server() {
    try {
        stop();
    } catch (...) {
        // Destructors do not throw; the process is gone or beyond our reach.
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

void redis_server::make_tls_files() {
    auto const path = [&](char const* name) { return dir_ + "/" + name; };
    {
        std::ofstream ext(path("server.ext"));
        ext << "basicConstraints=critical,CA:FALSE\n"
               "keyUsage=critical,digitalSignature,keyEncipherment\n"
               "extendedKeyUsage=serverAuth\n"
               "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
        if (!ext)
            fail("cannot write " + path("server.ext"));
    }
    std::vector<std::vector<std::string>> const steps = {
        {"openssl",
         "req",
         "-x509",
         "-new",
         "-nodes",
         "-newkey",
         "ec",
         "-pkeyopt",
         "ec_paramgen_curve:prime256v1",
         "-keyout",
         path("ca.key"),
         "-out",
         path("ca.crt"),
         "-days",
         "30",
         "-subj",
         "/CN=colock test CA",
         "-addext",
         "basicConstraints=critical,CA:TRUE",
         "-addext",
         "keyUsage=critical,keyCertSign,cRLSign"},
        {"openssl", "req", "-new", "-nodes", "-newkey", "ec", "-pkeyopt",
         "ec_paramgen_curve:prime256v1", "-keyout", path("server.key"), "-out", path("server.csr"),
         "-subj", "/CN=localhost"},
        {"openssl", "x509", "-req", "-in", path("server.csr"), "-CA", path("ca.crt"), "-CAkey",
         path("ca.key"), "-CAcreateserial", "-out", path("server.crt"), "-days", "30", "-extfile",
         path("server.ext")},
    };
    for (auto const& argv : steps) {
        auto const r = run(argv);
        if (!r.ok())
            fail("certificate generation failed (" + describe_status(r.status) +
                 "): " + join(argv) + "\n" + r.out + r.err);
    }
    ca_file_ = path("ca.crt");
}

std::vector<std::string> redis_server::server_args() const {
    bool const sentinel = !opts_.sentinel_master_name.empty();
    std::vector<std::string> a;
    if (sentinel) // settings after the file's name override what a sentinel rewrote into it
        a = {redis_sentinel_exe(), dir_ + "/sentinel.conf"};
    else
        a = {redis_server_exe(), "--save", "", "--appendonly", "no"};
    a.insert(a.end(),
             {"--port", std::to_string(port_), "--bind", "127.0.0.1", "--dir", dir_, "--daemonize",
              "no", "--logfile", dir_ + "/redis.log", "--protected-mode", "yes"});
    if (sentinel) {
        std::string const& name = opts_.sentinel_master_name;
        a.insert(a.end(), {"--sentinel", "monitor", name, "127.0.0.1",
                           std::to_string(opts_.sentinel_primary_port),
                           std::to_string(opts_.sentinel_quorum)});
        a.insert(a.end(), {"--sentinel", "down-after-milliseconds", name,
                           std::to_string(opts_.sentinel_down_after_ms)});
        a.insert(a.end(), {"--sentinel", "failover-timeout", name,
                           std::to_string(opts_.sentinel_failover_timeout_ms)});
        if (!opts_.sentinel_auth_pass.empty())
            a.insert(a.end(), {"--sentinel", "auth-pass", name, opts_.sentinel_auth_pass});
        if (!opts_.sentinel_auth_user.empty())
            a.insert(a.end(), {"--sentinel", "auth-user", name, opts_.sentinel_auth_user});
    }
    if (!opts_.requirepass.empty())
        a.insert(a.end(), {"--requirepass", opts_.requirepass});
    if (!opts_.acl_user.empty())
        a.insert(a.end(),
                 {"--user", opts_.acl_user, "on", ">" + opts_.acl_password, "~*", "&*", "+@all"});
    auto const tls = tls_args();
    a.insert(a.end(), tls.begin(), tls.end());
    if (opts_.unix_socket)
        a.insert(a.end(), {"--unixsocket", unix_socket_path(), "--unixsocketperm", "700"});
    a.insert(a.end(), opts_.extra_args.begin(), opts_.extra_args.end());
    return a;
}

std::string redis_server::tls_files_dir() const {
    if (!opts_.tls)
        return {};
    return opts_.tls_files_from.empty() ? dir_ : opts_.tls_files_from;
}

std::vector<std::string> redis_server::tls_args() const {
    if (!opts_.tls)
        return {};
    std::string const files = tls_files_dir();
    return {"--tls-port",         std::to_string(tls_port_),
            "--tls-cert-file",    files + "/server.crt",
            "--tls-key-file",     files + "/server.key",
            "--tls-ca-cert-file", ca_file_,
            "--tls-auth-clients", "no"};
}

bool redis_server::try_start() {
    std::string const log_path = dir_ + "/redis.log";
    std::string const out_path = dir_ + "/redis.out";
    // The log is appended to across restarts: look only at what this attempt writes.
    auto const log_offset = file_size_or_zero(log_path);
    auto const out_offset = file_size_or_zero(out_path);

    auto const args = server_args();
    pid_t const child = spawn_server(args, out_path);
    pid_ = child;

    auto const output_since_start = [&] {
        return read_file_from(log_path, log_offset) + read_file_from(out_path, out_offset);
    };
    auto const deadline = clock_type::now() + 15s;
    while (clock_type::now() < deadline) {
        int status = 0;
        pid_t const r = ::waitpid(child, &status, WNOHANG);
        if (r == child) {
            pid_ = -1;
            auto const output = output_since_start();
            if (output.find("Address already in use") != std::string::npos)
                return false;
            fail("redis-server exited at start (" + describe_status(status) + "): " + join(args) +
                 "\n" + last_lines(output, 20));
        }
        // A sentinel logs no "Ready": it is ready once it monitors its primary.
        std::string const ready = opts_.sentinel_master_name.empty()
                                      ? "Ready to accept connections"
                                      : "+monitor master " + opts_.sentinel_master_name;
        if (output_since_start().find(ready) != std::string::npos) {
            // The port answers; make sure it is our process that does, not one that won a race
            // for the port.
            try {
                auto const info = cli({"INFO", "server"});
                if (info.find("process_id:" + std::to_string(child) + "\r") != std::string::npos ||
                    info.find("process_id:" + std::to_string(child) + "\n") != std::string::npos)
                    return true;
            } catch (std::runtime_error const&) {
                // not answering yet
            }
        }
        std::this_thread::sleep_for(20ms);
    }
    auto const output = output_since_start();
    send_signal(SIGKILL);
    reap_within(5000);
    fail("redis-server did not become ready within 15 s: " + join(args) + "\n" +
         last_lines(output, 20));
}

void redis_server::send_signal(int sig) const {
    int const p = pid_.load();
    if (p > 0)
        ::kill(p, sig);
}

bool redis_server::reap_within(int patience_ms) {
    int const p = pid_.load();
    if (p <= 0)
        return true;
    auto const deadline = clock_type::now() + std::chrono::milliseconds(patience_ms);
    for (;;) {
        int status = 0;
        pid_t const r = ::waitpid(p, &status, WNOHANG);
        if (r == p || (r < 0 && errno == ECHILD)) {
            pid_ = -1;
            return true;
        }
        if (clock_type::now() >= deadline)
            return false;
        std::this_thread::sleep_for(5ms);
    }
}

void redis_server::kill() {
    int const p = pid_.load();
    if (p <= 0)
        return;
    ::kill(p, SIGKILL);
    int status = 0;
    // ECHILD: running() on another thread reaped it first.
    while (::waitpid(p, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
}

void redis_server::stop() {
    if (pid_.load() <= 0)
        return;
    send_signal(SIGTERM);
    send_signal(SIGCONT); // a paused server must run to act on SIGTERM
    if (!reap_within(5000))
        kill();
}

void redis_server::restart() {
    stop();
    // The old process is gone, but the port may still be held briefly (by a client's
    // connection in TIME_WAIT, or by another process that just took it): retry for a while.
    auto const deadline = clock_type::now() + 10s;
    while (!try_start()) {
        if (clock_type::now() >= deadline)
            fail("restart: port " + std::to_string(port_) + " stayed in use for 10 s; log:\n" +
                 log_tail());
        std::this_thread::sleep_for(100ms);
    }
}

void redis_server::pause() {
    send_signal(SIGSTOP);
}

void redis_server::resume() {
    send_signal(SIGCONT);
}

bool redis_server::running() const {
    int p = pid_.load();
    if (p <= 0)
        return false;
    int status = 0;
    pid_t const r = ::waitpid(p, &status, WNOHANG);
    if (r == p || (r < 0 && errno == ECHILD)) {
        pid_.compare_exchange_strong(p, -1);
        return false;
    }
    return true;
}

std::string redis_server::url() const {
    std::string auth;
    if (!opts_.requirepass.empty())
        auth = ":" + percent_encode(opts_.requirepass) + "@";
    return "redis://" + auth + "127.0.0.1:" + std::to_string(port_);
}

colock::redis::config redis_server::config() const {
    colock::redis::config cfg;
    cfg.host = "127.0.0.1";
    cfg.port = port_;
    cfg.password = opts_.requirepass;
    return cfg;
}

colock::redis::config redis_server::tls_config() const {
    if (!opts_.tls)
        throw std::logic_error("redis_server::tls_config: the server was started without tls");
    colock::redis::config cfg = config();
    cfg.port = tls_port_;
    cfg.use_tls = true;
    cfg.tls_verify_peer = true;
    cfg.tls_ca_file = ca_file_;
    return cfg;
}

std::string redis_server::unix_socket_path() const {
    return opts_.unix_socket ? dir_ + "/redis.sock" : std::string();
}

colock::redis::config redis_server::unix_config() const {
    if (!opts_.unix_socket)
        throw std::logic_error(
            "redis_server::unix_config: the server was started without a unix socket");
    colock::redis::config cfg = config();
    cfg.unix_socket = unix_socket_path();
    return cfg;
}

std::string redis_server::cli(std::vector<std::string> const& args) const {
    std::vector<std::string> argv = {redis_cli_exe(), "-h", "127.0.0.1", "-p",
                                     std::to_string(port_)};
    if (!opts_.requirepass.empty())
        argv.insert(argv.end(), {"--pass", opts_.requirepass, "--no-auth-warning"});
    else if (!opts_.acl_user.empty())
        argv.insert(argv.end(),
                    {"--user", opts_.acl_user, "--pass", opts_.acl_password, "--no-auth-warning"});
    argv.push_back("-e"); // an error reply makes the exit status non-zero
    argv.insert(argv.end(), args.begin(), args.end());

    auto r = run(argv);
    if (!r.ok())
        throw std::runtime_error("redis_server::cli: " + join(argv) + " failed (" +
                                 describe_status(r.status) + "): " + r.out + r.err);
    if (!r.out.empty() && r.out.back() == '\n')
        r.out.pop_back();
    return r.out;
}

std::vector<std::string> redis_server::cli_lines(std::vector<std::string> const& args) const {
    std::vector<std::string> out;
    std::istringstream in(cli(args));
    for (std::string line; std::getline(in, line);)
        if (!line.empty())
            out.push_back(line);
    return out;
}

std::string redis_server::log_tail(std::size_t lines) const {
    return last_lines(read_file_from(dir_ + "/redis.log"), lines) +
           last_lines(read_file_from(dir_ + "/redis.out"), lines);
}

redis_server& shared_server() {
    static redis_server server;
    return server;
}

} // namespace colock::test
