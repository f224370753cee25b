// The command line: subcommands, options (before or after the subcommand, "--opt value" or
// "--opt=value"), durations, and the help text.
#include "cli.hpp"

#include "text.hpp"

#include <colock/lock_options.hpp>
#include <colock/version.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <limits>

namespace colock::cli {

namespace {

using std::chrono::milliseconds;

std::string_view name_of(subcommand cmd) {
    switch (cmd) {
    case subcommand::exec:
        return "exec";
    case subcommand::status:
        return "status";
    case subcommand::list:
        return "list";
    case subcommand::unlock:
        return "unlock";
    case subcommand::elect:
        return "elect";
    case subcommand::leader:
        return "leader";
    case subcommand::resign:
        return "resign";
    case subcommand::none:
        break;
    }
    return "";
}

// exec and elect run a command after "--".
bool runs_command(subcommand cmd) {
    return cmd == subcommand::exec || cmd == subcommand::elect;
}

// The word for the NAME operand, in messages.
std::string_view name_word(subcommand cmd) {
    return cmd == subcommand::elect || cmd == subcommand::leader || cmd == subcommand::resign
               ? "election name"
               : "lock name";
}

std::optional<subcommand> subcommand_named(std::string_view word) {
    for (auto cmd : {subcommand::exec, subcommand::status, subcommand::list, subcommand::unlock,
                     subcommand::elect, subcommand::leader, subcommand::resign})
        if (word == name_of(cmd))
            return cmd;
    return std::nullopt;
}

// Reads the options and operands of one command line, in order.
class parser {
public:
    parser(int argc, char const* const* argv) : args_(argv + 1, argv + (argc > 0 ? argc : 1)) {}

    options parse(char const* env_url) {
        if (env_url != nullptr && *env_url != '\0') {
            o_.url = env_url;
            o_.url_source = "COLOCK_REDIS_URL";
        }
        // --help and --version win over everything else on the line (before "--").
        for (auto const& a : args_) {
            if (a == "--")
                break;
            if (a == "-h" || a == "--help")
                o_.help = true;
            else if (a == "--version")
                o_.version = true;
        }
        if (o_.help || o_.version)
            return o_;

        std::vector<std::string> operands;
        bool options_ended = false;
        bool saw_separator = false;
        for (i_ = 0; i_ < args_.size(); ++i_) {
            std::string const& a = args_[i_];
            if (!options_ended && a == "--") {
                if (runs_command(o_.cmd)) {
                    saw_separator = true;
                    o_.command.assign(args_.begin() + static_cast<std::ptrdiff_t>(i_ + 1),
                                      args_.end());
                    break;
                }
                options_ended = true;
                continue;
            }
            if (!options_ended && a.size() > 1 && a[0] == '-') {
                option(a);
                continue;
            }
            if (o_.cmd == subcommand::none) {
                auto const cmd = subcommand_named(a);
                if (!cmd)
                    throw usage_error(subcommand::none,
                                      fmt::format("unknown subcommand '{}'", printable(a)));
                o_.cmd = *cmd;
                continue;
            }
            operands.push_back(a);
        }
        // A candidate stands by until it leads, unless told otherwise.
        if (o_.cmd == subcommand::elect && !wait_given_)
            o_.wait = std::nullopt;
        finish(std::move(operands), saw_separator);
        return o_;
    }

private:
    [[noreturn]] void refuse(std::string const& message) const {
        throw usage_error(o_.cmd, o_.cmd == subcommand::none
                                      ? message
                                      : fmt::format("{}: {}", name_of(o_.cmd), message));
    }

    // One option, "--name", "--name=value" or "-h"; takes its value from the next argument
    // when it needs one and has none inline.
    void option(std::string const& arg) {
        std::string name = arg;
        std::optional<std::string> inline_value;
        if (arg.starts_with("--"))
            if (auto eq = arg.find('='); eq != std::string::npos) {
                name = arg.substr(0, eq);
                inline_value = arg.substr(eq + 1);
            }
        auto value = [&]() -> std::string {
            if (inline_value)
                return *inline_value;
            if (i_ + 1 >= args_.size())
                refuse(fmt::format("{} needs a value", name));
            return args_[++i_];
        };
        auto flag = [&](bool& target) {
            if (inline_value)
                refuse(fmt::format("{} takes no value", name));
            target = true;
        };
        auto const cmd = o_.cmd;
        if (name == "--url") {
            o_.url = value();
            o_.url_source = "--url";
        } else if (name == "--prefix") {
            o_.prefix = value();
        } else if (name == "-v" || name == "--verbose") {
            flag(o_.verbose);
        } else if (runs_command(cmd) && name == "--ttl") {
            o_.ttl = duration(name, value());
        } else if (runs_command(cmd) && name == "--wait") {
            auto const v = value();
            o_.wait = v == "forever" ? std::nullopt : std::optional{duration(name, v)};
            wait_given_ = true;
        } else if (runs_command(cmd) && name == "--grace") {
            o_.grace = duration(name, value());
        } else if (cmd == subcommand::exec && name == "--all") {
            flag(o_.all);
            if (o_.permits || o_.rw != options::rw_mode::none)
                refuse("--all and --permits, --shared or --exclusive: --all holds locks only");
        } else if (cmd != subcommand::none && name == "--all") {
            refuse("--all is an option of exec only (a command run under several locks)");
        } else if (cmd == subcommand::exec && name == "--permits") {
            o_.permits = permits(name, value());
            if (o_.all)
                refuse("--all and --permits: --all holds locks only");
            if (o_.rw != options::rw_mode::none)
                refuse("--permits and --shared or --exclusive: a command holds a semaphore's "
                       "permit or a read-write lock, not both");
        } else if (cmd != subcommand::none && name == "--permits") {
            refuse("--permits is an option of exec only (a command run under a semaphore's "
                   "permit)");
        } else if (cmd == subcommand::exec && (name == "--shared" || name == "--exclusive")) {
            bool on = false;
            flag(on);
            auto const mode =
                name == "--shared" ? options::rw_mode::shared : options::rw_mode::exclusive;
            if (o_.rw != options::rw_mode::none && o_.rw != mode)
                refuse("--shared and --exclusive: a command holds the read-write lock one way");
            if (o_.permits)
                refuse(fmt::format("--permits and {}: a command holds a semaphore's permit or a "
                                   "read-write lock, not both",
                                   name));
            if (o_.all)
                refuse(fmt::format("--all and {}: --all holds locks only", name));
            o_.rw = mode;
        } else if (cmd != subcommand::none && (name == "--shared" || name == "--exclusive")) {
            refuse(fmt::format("{} is an option of exec only (a command run under a read-write "
                               "lock)",
                               name));
        } else if (cmd == subcommand::elect && name == "--value") {
            o_.value = value();
        } else if ((cmd == subcommand::status || cmd == subcommand::list ||
                    cmd == subcommand::leader) &&
                   name == "--json") {
            flag(o_.json);
        } else if (cmd == subcommand::leader && name == "--watch") {
            flag(o_.watch);
        } else if ((cmd == subcommand::unlock || cmd == subcommand::resign) && name == "--force") {
            flag(o_.force);
        } else if (cmd == subcommand::none) {
            refuse(fmt::format("unknown option '{}' (subcommand options go after the subcommand)",
                               printable(name)));
        } else {
            refuse(fmt::format("unknown option '{}'", printable(name)));
        }
    }

    milliseconds duration(std::string const& option, std::string const& text) const {
        auto const d = parse_duration(text);
        if (!d)
            refuse(fmt::format("{}: bad duration '{}' (use e.g. 500ms, 30s, 2m or 1h; a bare "
                               "number is seconds)",
                               option, printable(text)));
        return *d;
    }

    // A capacity: decimal digits only, 1 to max_permits.
    std::size_t permits(std::string const& option, std::string const& text) const {
        std::size_t n = 0;
        bool digits = !text.empty();
        for (char c : text) {
            if (c < '0' || c > '9') {
                digits = false;
                break;
            }
            n = n * 10 + static_cast<std::size_t>(c - '0');
            if (n > max_permits)
                break; // refused below; no overflow however long the text
        }
        if (!digits || n == 0 || n > max_permits)
            refuse(fmt::format("{}: bad capacity '{}' (a whole number from 1 to {})", option,
                               printable(text), max_permits));
        return n;
    }

    // exec --all: every operand is a lock's name, each checked as need_name checks one.
    void need_names(std::vector<std::string> const& operands) {
        if (operands.empty())
            refuse("missing the lock names (--all NAME... -- COMMAND)");
        for (auto const& n : operands) {
            if (n.empty())
                refuse("a lock name is empty");
            if (n.size() > max_lock_name_length)
                refuse(fmt::format("the lock name '{}...' is {} bytes, over the limit of {}",
                                   printable(n.substr(0, 20)), n.size(), max_lock_name_length));
        }
        o_.names = operands;
        o_.name = fmt::format("{}", fmt::join(operands, " "));
    }

    void need_name(std::vector<std::string> const& operands) {
        auto const what = name_word(o_.cmd);
        if (operands.empty())
            refuse(fmt::format("missing the {}", what));
        o_.name = operands.front();
        if (o_.name.size() > max_lock_name_length)
            refuse(fmt::format("the {} is {} bytes, over the limit of {}", what, o_.name.size(),
                               max_lock_name_length));
    }

    void finish(std::vector<std::string> operands, bool saw_separator) {
        switch (o_.cmd) {
        case subcommand::none:
            throw usage_error(subcommand::none, "missing the subcommand");
        case subcommand::exec:
        case subcommand::elect:
            if (!saw_separator)
                refuse(operands.size() > 1
                           ? fmt::format("missing '--' between the {} and the command",
                                         name_word(o_.cmd))
                           : "missing '--' and the command to run (NAME -- COMMAND [ARGS...])");
            if (o_.all) {
                need_names(operands);
            } else {
                if (operands.size() > 1)
                    refuse(fmt::format("one {} expected before '--', got {} (several locks at "
                                       "once: --all)",
                                       name_word(o_.cmd), operands.size()));
                need_name(operands);
            }
            if (o_.command.empty())
                refuse("no command after '--'");
            check_lease_durations();
            break;
        case subcommand::status:
        case subcommand::unlock:
        case subcommand::leader:
        case subcommand::resign:
            if (operands.size() > 1)
                refuse(fmt::format("one {} expected, got {}", name_word(o_.cmd), operands.size()));
            need_name(operands);
            if (o_.cmd == subcommand::unlock && !o_.force)
                refuse("refusing without --force: it ends the lease of whoever holds the lock, "
                       "while that holder may still be at work");
            if (o_.cmd == subcommand::resign && !o_.force)
                refuse("refusing without --force: it ends the term of whoever leads, while that "
                       "leader may still be at work (a leader resigns by itself when its elect "
                       "command exits)");
            break;
        case subcommand::list:
            if (operands.size() > 1)
                refuse(fmt::format("at most one pattern expected, got {}", operands.size()));
            if (!operands.empty())
                o_.pattern = operands.front();
            if (o_.pattern.empty())
                refuse("the pattern is empty");
            break;
        }
        if (o_.name.empty() && o_.cmd != subcommand::list)
            refuse(fmt::format("the {} is empty", name_word(o_.cmd)));
    }

    void check_lease_durations() const {
        if (o_.ttl.count() <= 0)
            refuse("--ttl must be above 0");
        // The lease is renewed every third of it, which must be at least a millisecond.
        if (o_.ttl < milliseconds{3})
            refuse(fmt::format("--ttl {}: too short to renew (at least 3ms)",
                               format_duration(o_.ttl)));
        if (o_.ttl > max_lock_ttl)
            refuse(fmt::format("--ttl {}: above the longest lease, {}", format_duration(o_.ttl),
                               format_duration(max_lock_ttl)));
    }

    std::vector<std::string> args_;
    std::size_t i_ = 0;
    options o_;
    bool wait_given_ = false;
};

} // namespace

std::optional<milliseconds> parse_duration(std::string_view text) {
    constexpr auto max = std::numeric_limits<std::int64_t>::max();
    std::size_t pos = 0;
    std::int64_t whole = 0;
    std::size_t whole_digits = 0;
    for (; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos, ++whole_digits) {
        if (whole > (max - 9) / 10)
            return std::nullopt;
        whole = whole * 10 + (text[pos] - '0');
    }
    // Up to 9 decimals; more would not change a count of milliseconds anyway.
    std::int64_t fraction = 0;
    std::int64_t scale = 1;
    std::size_t fraction_digits = 0;
    if (pos < text.size() && text[pos] == '.') {
        for (++pos; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; ++pos) {
            if (++fraction_digits <= 9) {
                fraction = fraction * 10 + (text[pos] - '0');
                scale *= 10;
            }
        }
        if (fraction_digits == 0)
            return std::nullopt;
    }
    if (whole_digits == 0)
        return std::nullopt;
    auto const unit = text.substr(pos);
    std::int64_t unit_ms = 0;
    if (unit.empty() || unit == "s")
        unit_ms = 1000;
    else if (unit == "ms")
        unit_ms = 1;
    else if (unit == "m")
        unit_ms = 60'000;
    else if (unit == "h")
        unit_ms = 3'600'000;
    else
        return std::nullopt;
    if (whole > max / unit_ms)
        return std::nullopt;
    // fraction < 1e9 and unit_ms <= 3.6e6: the product fits; rounded to the nearest ms.
    auto const extra = (fraction * unit_ms + scale / 2) / scale;
    if (whole * unit_ms > max - extra)
        return std::nullopt;
    return milliseconds{whole * unit_ms + extra};
}

options parse_args(int argc, char const* const* argv, char const* env_url) {
    return parser{argc, argv}.parse(env_url);
}

std::string usage_line(subcommand cmd) {
    switch (cmd) {
    case subcommand::exec:
        return "usage: colock [OPTIONS] exec [--permits N | --shared | --exclusive] [--ttl D] "
               "[--wait D|forever] [--grace D] NAME -- COMMAND [ARGS...], or exec --all [...] "
               "NAME... -- COMMAND [ARGS...]";
    case subcommand::status:
        return "usage: colock [OPTIONS] status [--json] NAME";
    case subcommand::list:
        return "usage: colock [OPTIONS] list [--json] [PATTERN]";
    case subcommand::unlock:
        return "usage: colock [OPTIONS] unlock --force NAME";
    case subcommand::elect:
        return "usage: colock [OPTIONS] elect [--value V] [--ttl D] [--wait D|forever] "
               "[--grace D] NAME -- COMMAND [ARGS...]";
    case subcommand::leader:
        return "usage: colock [OPTIONS] leader [--json] [--watch] NAME";
    case subcommand::resign:
        return "usage: colock [OPTIONS] resign --force NAME";
    case subcommand::none:
        break;
    }
    return "usage: colock [--url URL] [--prefix P] {exec|status|list|unlock|elect|leader|resign} "
           "...";
}

std::string help_text() {
    return fmt::format(
        R"(colock {} - run a command under a distributed lock held in Redis, under a permit of a
semaphore, or while leading an election, and inspect locks and leaders

usage:
  colock [OPTIONS] exec [--permits N | --shared | --exclusive] [--ttl D] [--wait D|forever]
                        [--grace D] NAME -- COMMAND [ARGS...]
  colock [OPTIONS] exec --all [--ttl D] [--wait D|forever] [--grace D] NAME... -- COMMAND
                        [ARGS...]
  colock [OPTIONS] status [--json] NAME
  colock [OPTIONS] list [--json] [PATTERN]
  colock [OPTIONS] unlock --force NAME
  colock [OPTIONS] elect [--value V] [--ttl D] [--wait D|forever] [--grace D] NAME -- COMMAND
                         [ARGS...]
  colock [OPTIONS] leader [--json] [--watch] NAME
  colock [OPTIONS] resign --force NAME

subcommands:
  exec     Take lock NAME, run COMMAND while the lease is renewed, release the lock when
           COMMAND exits and exit with its status. If the lease is lost meanwhile, COMMAND
           gets SIGTERM, then SIGKILL after --grace. SIGTERM and SIGHUP to colock are passed
           on to COMMAND; so is SIGINT, unless colock runs in the terminal's foreground (the
           terminal sends it to COMMAND too). With --permits N: hold one permit of
           semaphore NAME of capacity N instead (at most N such commands run at once,
           waiting ones served first come, first served); every user of NAME must give the
           same N. With --shared: hold read-write lock NAME as a reader (many at once);
           with --exclusive: as its writer (alone; a waiting writer holds back the readers
           that come after it). With --all NAME...: hold the locks of every NAME at once,
           all or none (no deadlock with commands that name them in another order);
           COLOCK_NAME and COLOCK_FENCE then list the names and their fences, in the order
           given.
  status   Show lock NAME: state, holder (locker id, host, pid, program), lease start, time
           left, fence, queued processes. Exit 0 when held, 1 when free or handed over.
  list     Show every lock whose name matches PATTERN (a Redis glob; default *), free ones
           included.
  unlock   End the lease of whoever holds NAME now. The holder is told at once and stops;
           its command gets SIGTERM. Needs --force. Exit 0 when a lease was ended, 1 when
           nobody held the lock.
  elect    Campaign in election NAME (candidates lead in turn, first come first served),
           run COMMAND while leading, resign when COMMAND exits (the next candidate leads at
           once) and exit with its status. Waits to lead without a limit unless --wait says
           otherwise. Loss of the leadership and signals as for exec.
  leader   Show who leads election NAME: value, term, holder (locker id, host, pid,
           program), time left. Exit 0 when someone leads, 1 when nobody does. With --watch,
           print the leader now and then one line (or JSON object) per change, "no leader"
           included, until SIGINT, SIGTERM or SIGHUP (exit 0).
  resign   End the term of whoever leads election NAME now. The leader is told at once and
           stops (its command gets SIGTERM), every watch sees nobody leading, and the first
           waiting candidate leads within a second. Needs --force. Exit 0 when a term was
           ended, 1 when nobody led.

options (before or after the subcommand; --opt VALUE or --opt=VALUE):
  --url URL        the Redis server: redis://[[user]:password@]host[:port][/db],
                   rediss://... (TLS) or unix:///path/to/redis.sock[?db=N];
                   Sentinel: redis-sentinel://host[:port][,host[:port]...]/master[/db];
                   Cluster: redis-cluster://host[:port][,host[:port]...]
                   (default: $COLOCK_REDIS_URL, else redis://127.0.0.1:6379)
  --prefix P       key prefix of the locks (default colock:)
  -v, --verbose    print the library's log lines (connections, losses) to stderr
  --permits N      exec: a semaphore of capacity N (1 to 1000000) instead of a lock
  --shared         exec: read-write lock NAME as a reader instead of a lock
  --exclusive      exec: read-write lock NAME as its writer instead of a lock
  --ttl D          exec, elect: the lease, renewed every third of it (default 30s); for
                   elect, how long a dead leader holds the election up
  --wait D         exec, elect: how long to wait for the lock or to lead (exec's default
                   10s, elect's forever; 0: one attempt; forever: no limit)
  --grace D        exec, elect: from SIGTERM to SIGKILL when the lease is lost (default 10s)
  --value V        elect: what the leader proclaims (default HOST:PID of colock)
  --json           status, list, leader: print JSON
  --watch          leader: print every change until a signal
  --force          unlock, resign: required
  -h, --help       print this help
  --version        print the version
Durations: 500ms, 30s, 2m, 1h, 1.5s; a bare number is seconds.

exit status:
  0    success; exec, elect: the command's own status (128+N when signal N ended it)
  1    status: the lock is not held; unlock: nobody held the lock; leader, resign: nobody
       leads
  2    usage error
  120  exec: the lock (a permit, a read or write lock) was not acquired within --wait;
       elect: not leading
       within --wait
  121  exec, elect: the lease or the leadership was lost while the command ran (the
       command was sent SIGTERM)
  122  the Redis server could not be reached, or a Redis or tool error; leader --watch:
       the watch ended without a signal
  123  exec --permits N: the semaphore has another capacity than N at the server
  126  exec, elect: the command could not be executed
  127  exec, elect: the command was not found

environment:
  COLOCK_REDIS_URL  the Redis server when --url is not given
)",
        COLOCK_VERSION_STRING);
}

} // namespace colock::cli
