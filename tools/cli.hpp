// The colock command-line tool: its exit codes, its options and the subcommands' entry points.
#pragma once

#include <colock/locker.hpp>
#include <colock/redis/connection.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace colock::cli {

// Exit codes. 0, 1 and a command's own status are the answer; the 12x codes are above what
// commands commonly use and below the shell's 126/127 and 128+N.
inline constexpr int exit_ok = 0;
/// status: the lock is not held (free or handed over); unlock: nobody held it; leader, resign:
/// nobody leads.
inline constexpr int exit_no = 1;
inline constexpr int exit_usage = 2;
/// exec: the lock (with --permits, a permit) was not acquired within --wait; elect: not
/// elected within --wait.
inline constexpr int exit_not_acquired = 120;
/// exec: the lease was lost while the command ran; elect: the leadership was lost. The
/// command was sent SIGTERM.
inline constexpr int exit_lost = 121;
/// The server could not be reached, or Redis or the tool failed; leader --watch: the watch
/// ended without a signal.
inline constexpr int exit_failure = 122;
/// exec --permits N: the semaphore has another capacity at the server (its users give another
/// N). Not a usage error (the command line is well formed) nor a failure worth retrying: the
/// users of the name disagree, and nothing was changed.
inline constexpr int exit_capacity_mismatch = 123;
/// exec, elect: the command was found but could not be executed (as shells report it).
inline constexpr int exit_not_executable = 126;
/// exec, elect: the command was not found (as shells report it).
inline constexpr int exit_not_found = 127;

/// The largest --permits: a semaphore's largest capacity (colock::semaphore's constructor).
inline constexpr std::size_t max_permits = 1'000'000;

enum class subcommand { none, exec, status, list, unlock, elect, leader, resign };

/// The command line, parsed and checked.
struct options {
    subcommand cmd = subcommand::none;
    bool help = false;
    bool version = false;
    /// --url, else COLOCK_REDIS_URL, else the default; url_source says which (for messages).
    std::string url = "redis://127.0.0.1:6379";
    std::string url_source = "the default URL";
    std::string prefix = "colock:";
    bool verbose = false;

    // exec, elect
    std::chrono::milliseconds ttl{30'000};
    /// How long to wait for the lock or the leadership; nullopt: without a limit ("--wait
    /// forever", and elect's default).
    std::optional<std::chrono::milliseconds> wait = std::chrono::milliseconds{10'000};
    std::chrono::milliseconds grace{10'000};
    std::vector<std::string> command;
    /// exec --permits N: hold one permit of the semaphore NAME of capacity N instead of the
    /// lock NAME.
    std::optional<std::size_t> permits;
    /// exec --shared / --exclusive: hold the read-write lock NAME as a reader / as its writer
    /// instead of the lock NAME.
    enum class rw_mode { none, shared, exclusive };
    rw_mode rw = rw_mode::none;
    /// exec --all: hold the locks of every name of `names` at once (locker::co_lock_all) instead
    /// of the lock NAME; `name` is then the names joined by spaces.
    bool all = false;
    std::vector<std::string> names;
    /// elect: what the leader proclaims; nullopt: "<host>:<pid>" of the tool's process.
    std::optional<std::string> value;

    // exec, status, unlock: the lock; elect, leader, resign: the election; list: the pattern.
    std::string name;
    std::string pattern = "*";
    bool json = false;
    bool force = false;
    /// leader: print every change until a signal.
    bool watch = false;
};

/// A command line the tool cannot run: the message names what is wrong; main prints it with
/// the subcommand's usage line and exits with exit_usage.
class usage_error : public std::runtime_error {
public:
    usage_error(subcommand cmd, std::string const& message)
        : std::runtime_error(message), cmd_(cmd) {}
    subcommand cmd() const noexcept { return cmd_; }

private:
    subcommand cmd_;
};

/// Parses argv. `env_url` is COLOCK_REDIS_URL (nullptr when unset). Throws usage_error.
options parse_args(int argc, char const* const* argv, char const* env_url);

/// "500ms", "30s", "2m", "1h", "1.5s"; a bare number is seconds. nullopt when `text` is not
/// one of those, or too large for milliseconds.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

/// One line: "usage: colock ..." for the subcommand (or for all when none).
std::string usage_line(subcommand cmd);
/// The --help text.
std::string help_text();

// The subcommands. Each returns its exit code; a failure of the server or the connection is
// thrown (main reports it and exits with exit_failure).
boost::asio::awaitable<int> run_exec(options const& opt, redis::connection& conn, locker& lk);
boost::asio::awaitable<int> run_status(options const& opt, locker& lk);
boost::asio::awaitable<int> run_list(options const& opt, redis::connection& conn, locker& lk);
boost::asio::awaitable<int> run_unlock(options const& opt, locker& lk);
boost::asio::awaitable<int> run_elect(options const& opt, redis::connection& conn, locker& lk);
boost::asio::awaitable<int> run_leader(options const& opt, locker& lk);
boost::asio::awaitable<int> run_resign(options const& opt, locker& lk);

/// Prints "colock: <message>" to stderr.
void complain(std::string_view message);

} // namespace colock::cli
