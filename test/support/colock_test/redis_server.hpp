// A real redis-server for integration tests, started on a free loopback port and stopped
// afterwards. Nothing mocks Redis: tests and examples talk to this process, and fault tests kill,
// pause and restart it.
#pragma once

#include <colock/redis/config.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace colock::test {

/// The base of the fixtures that start processes (a server, a deployment of servers): each
/// stops what it started when it goes, so none may be copied.
class process_fixture {
public:
    process_fixture(process_fixture const&) = delete;
    process_fixture& operator=(process_fixture const&) = delete;

protected:
    process_fixture() = default;
    ~process_fixture() = default;
};

struct redis_server_options {
    /// Also listen on a TLS port, with a certificate (SAN IP:127.0.0.1 and DNS:localhost) signed
    /// by a throwaway CA that openssl makes in the server's temporary directory. Clients are not
    /// asked for certificates. The plain port stays open too.
    bool tls = false;
    /// With `tls`: use the CA and certificate that another server made (its tls_files_dir())
    /// rather than making new ones, so that one CA file verifies several servers.
    std::string tls_files_from;
    /// Password of the "default" user, if set.
    std::string requirepass;
    /// An extra ACL user with every permission (`user X on >pass ~* &* +@all`), if set.
    std::string acl_user;
    std::string acl_password;
    /// Also listen on a unix domain socket, `redis.sock` in the server's temporary directory
    /// (`--unixsocket ... --unixsocketperm 700`), removed with the directory.
    bool unix_socket = false;
    /// More redis-server arguments, e.g. {"--maxclients", "50"}.
    std::vector<std::string> extra_args;
    /// Run as a sentinel (`redis-sentinel`, or COLOCK_REDIS_SENTINEL) that monitors the primary
    /// on 127.0.0.1:`sentinel_primary_port` under `sentinel_master_name`, when that is set. Its
    /// configuration file (which a sentinel rewrites) is in its temporary directory.
    std::string sentinel_master_name;
    std::uint16_t sentinel_primary_port = 0;
    int sentinel_quorum = 2;
    /// How long the primary must be unreachable before a sentinel thinks it down, and the
    /// failover timeout: short, so that a test's failover takes seconds.
    int sentinel_down_after_ms = 1000;
    int sentinel_failover_timeout_ms = 3000;
    /// The password the sentinel gives the data nodes (`sentinel auth-pass`), if they have one.
    std::string sentinel_auth_pass;
    /// The ACL user the sentinel logs in as on the data nodes (`sentinel auth-user`), if not
    /// the default user.
    std::string sentinel_auth_user;
};

/// One redis-server process: bound to 127.0.0.1 only, no persistence (`--save ""
/// --appendonly no`, so a restart starts empty), its files in a temporary directory.
///
/// Ports are picked below the kernel's ephemeral range, so no client's outgoing connection can
/// hold the port, or self-connect to it, while the server is down between kill() and restart().
///
/// The server is killed by the kernel if the test process dies without running its destructor
/// (crash, sanitizer abort, ctest timeout), so no redis-server outlives its test binary.
///
/// The executables are `redis-server`, `redis-cli` and `openssl` from PATH; the environment
/// variables COLOCK_REDIS_SERVER and COLOCK_REDIS_CLI override the first two.
///
/// @par Thread safety
/// The control functions (kill, restart, stop, pause, resume) must not run concurrently with
/// each other; the const functions may be called from any thread.
class redis_server : process_fixture {
public:
    /// Picks a free loopback port, starts redis-server and waits until it answers (and is the
    /// process we started). Throws std::runtime_error with the server's log tail on failure.
    explicit redis_server(redis_server_options opts = {});
    /// Stops the server (SIGTERM, SIGKILL after 5 s) and removes its temporary directory.
    ~redis_server();

    std::uint16_t port() const noexcept { return port_; }
    /// The TLS port; 0 unless options.tls.
    std::uint16_t tls_port() const noexcept { return tls_port_; }

    /// redis://127.0.0.1:PORT, with ":requirepass@" when the default user has a password.
    std::string url() const;
    /// Host 127.0.0.1 and the plain port; password = requirepass when set.
    colock::redis::config config() const;
    /// Host 127.0.0.1, the TLS port, use_tls, tls_verify_peer and tls_ca_file = the generated CA;
    /// password = requirepass when set. Throws std::logic_error unless options.tls.
    colock::redis::config tls_config() const;
    /// Path of the unix domain socket; empty unless options.unix_socket.
    std::string unix_socket_path() const;
    /// unix_socket = unix_socket_path(); password = requirepass when set. Host and port are
    /// those of the plain port, which the connection ignores. Throws std::logic_error unless
    /// options.unix_socket.
    colock::redis::config unix_config() const;
    /// PEM file of the CA that signed the server's certificate (empty unless options.tls).
    std::string const& ca_file() const noexcept { return ca_file_; }
    /// Where the CA, the certificate and its key are (empty unless options.tls).
    std::string tls_files_dir() const;

    /// SIGKILL and reap: the server vanishes without closing connections gracefully.
    void kill();
    /// Starts the server again on the same port(s) with the same options, after stopping it if
    /// it still runs, and waits until it is ready. Retries the bind for a few seconds. The data
    /// set is empty afterwards (no persistence), so scripts are gone too (NOSCRIPT).
    void restart();
    /// SIGTERM and reap (SIGKILL after 5 s). A paused server is resumed so it can exit.
    void stop();
    /// SIGSTOP: the server keeps its connections but answers nothing.
    void pause();
    /// SIGCONT.
    void resume();
    /// True while the process we started has not exited.
    bool running() const;
    /// The server's process id, or -1 when it is not running.
    int pid() const noexcept { return pid_.load(); }

    /// Runs `redis-cli -h 127.0.0.1 -p PORT [auth] -e args...` and returns its standard output
    /// without the trailing newline. Throws std::runtime_error (with stdout and stderr) when
    /// redis-cli fails, including on an error reply, or takes more than 30 s (a paused server
    /// answers nothing, so do not use it between pause() and resume()).
    std::string cli(std::vector<std::string> const& args) const;
    /// cli(args) cut into its non-empty lines (one per element of an array reply).
    std::vector<std::string> cli_lines(std::vector<std::string> const& args) const;

    /// The last lines of the server's log file, for failure messages.
    std::string log_tail(std::size_t lines = 20) const;

private:
    void make_tls_files();
    /// One attempt to start on port_ (and tls_port_). Returns false when the port was taken;
    /// throws on any other failure.
    bool try_start();
    std::vector<std::string> server_args() const;
    std::vector<std::string> tls_args() const;
    /// Sends `sig` to the server, if it runs.
    void send_signal(int sig) const;
    /// Waits up to `patience_ms` for the server to exit; true when it did (and was reaped).
    bool reap_within(int patience_ms);

    redis_server_options opts_;
    std::string dir_;
    std::string ca_file_;
    std::uint16_t port_ = 0;
    std::uint16_t tls_port_ = 0;
    /// -1 when no process runs. running() is const but reaps an exited process, and may be
    /// called from other threads: hence mutable and atomic.
    mutable std::atomic<int> pid_{-1};
};

/// One server per test binary, started on first use (default options) and stopped at exit.
redis_server& shared_server();

} // namespace colock::test
