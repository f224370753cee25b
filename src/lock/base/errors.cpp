// The lock layer's error category, the refusal of bad arguments before any I/O, and how the
// errors of an attempt are sorted into passing and lasting ones.
#include "lock/base/errors.hpp"

#include <colock/diagnostics.hpp>
#include <colock/error.hpp>
#include <colock/lock_options.hpp>
#include <colock/redis/connection.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace colock {

using boost::system::error_code;
using boost::system::system_error;

namespace {

class lock_category final : public boost::system::error_category {
public:
    char const* name() const noexcept override { return "colock"; }
    std::string message(int ev) const override {
        switch (static_cast<error>(ev)) {
        case error::timeout:
            return "the operation's deadline passed (wait_timeout for a lock, the release's "
                   "deadline for a release)";
        case error::lock_lost:
            return "the lock's lease was lost";
        case error::invalid_argument:
            return "invalid argument";
        case error::unexpected_reply:
            return "unexpected reply from a lock script";
        case error::not_held:
            return "the guard does not hold a lock";
        case error::replicas_not_acknowledged:
            return "too few replicas acknowledged the lock in time";
        case error::no_quorum:
            return "fewer than a majority of the Redlock primaries answered";
        case error::stale_fence:
            return "the resource holds a higher fence: a later holder wrote";
        }
        return "unknown colock error " + std::to_string(ev);
    }
};

[[noreturn]] void refuse(std::string const& what) {
    throw system_error(make_error_code(error::invalid_argument), "colock: " + what);
}

} // namespace

boost::system::error_category const& error_category() noexcept {
    static lock_category const instance;
    return instance;
}

void detail::validate_key_prefix(std::string_view prefix) {
    // Redis hashes the text between the first '{' and the first '}' after it, or the whole key
    // when that is empty: a prefix whose first '{' closes at once would hash every key whole.
    auto const open = prefix.find('{');
    if (open != std::string_view::npos && open + 1 < prefix.size() && prefix[open + 1] == '}')
        refuse(fmt::format("key prefix '{}' holds an empty hash tag ('{{}}'): every key would hash "
                           "whole, and on a Cluster a lock's keys would land in different slots",
                           prefix.substr(0, 80)));
}

void validate(std::string_view name, lock_options const& opt) {
    if (name.empty())
        refuse("lock name is empty");
    if (name.size() > max_lock_name_length)
        refuse(fmt::format("lock name is {} bytes, over the limit of {}", name.size(),
                           max_lock_name_length));
    if (name.front() == '}')
        refuse(fmt::format("lock name '{}' starts with '}}': its keys' hash tag ('{{{}}}') would "
                           "be empty, and on a Cluster its keys would land in different slots",
                           name.substr(0, 40), name.substr(0, 40)));
    if (opt.ttl.count() <= 0)
        refuse(fmt::format("lock_options.ttl must be positive (got {} ms)", opt.ttl.count()));
    if (opt.ttl > max_lock_ttl)
        refuse(fmt::format("lock_options.ttl ({} ms) is above max_lock_ttl ({} ms)",
                           opt.ttl.count(), max_lock_ttl.count()));
    if (opt.renew_interval) {
        if (opt.renew_interval->count() <= 0)
            refuse(fmt::format("lock_options.renew_interval must be positive (got {} ms)",
                               opt.renew_interval->count()));
        if (*opt.renew_interval >= opt.ttl)
            refuse(fmt::format("lock_options.renew_interval ({} ms) must be below ttl ({} ms)",
                               opt.renew_interval->count(), opt.ttl.count()));
    } else if (opt.effective_renew_interval().count() <= 0) {
        refuse(fmt::format("lock_options.ttl ({} ms) is too short to renew", opt.ttl.count()));
    }
    if (opt.wait_timeout && opt.wait_timeout->count() < 0)
        refuse(fmt::format("lock_options.wait_timeout must not be negative (got {} ms)",
                           opt.wait_timeout->count()));
    if (opt.first_connect_timeout.count() < 0)
        refuse(fmt::format("lock_options.first_connect_timeout must not be negative (got {} ms)",
                           opt.first_connect_timeout.count()));
    if (opt.max_hold && opt.max_hold->count() < 0)
        refuse(fmt::format("lock_options.max_hold must not be negative (got {} ms)",
                           opt.max_hold->count()));
    if (opt.retain.count() < 0 || opt.retain > max_lock_ttl)
        refuse(fmt::format("lock_options.retain must be between 0 and max_lock_ttl ({} ms), got "
                           "{} ms",
                           max_lock_ttl.count(), opt.retain.count()));
    if (opt.retain.count() > 0 && !opt.auto_renew)
        refuse("lock_options.retain needs auto_renew: a kept lease goes back by the time its "
               "holder would have renewed it");
    if (opt.wait_replicas > 0 &&
        (opt.replicas_timeout.count() <= 0 || opt.replicas_timeout > max_lock_ttl))
        refuse(fmt::format("lock_options.replicas_timeout must be positive and at most "
                           "max_lock_ttl when wait_replicas is set (got {} ms)",
                           opt.replicas_timeout.count()));
    if (opt.wait_replicas > 1'000'000)
        refuse(fmt::format("lock_options.wait_replicas ({}) is not a number of replicas",
                           opt.wait_replicas));
    if (opt.retry.initial.count() <= 0)
        refuse("lock_options.retry.initial must be positive");
    if (opt.retry.max < opt.retry.initial)
        refuse("lock_options.retry.max must not be below retry.initial");
    if (!(opt.retry.multiplier >= 1.0) || !std::isfinite(opt.retry.multiplier))
        refuse("lock_options.retry.multiplier must be a finite number >= 1");
}

bool is_transient_server_error(std::string_view server_text) noexcept {
    // The error's first word; "BUSYKEY" (RESTORE's) must not pass for "BUSY".
    auto const word = server_text.substr(0, server_text.find(' '));
    for (std::string_view passing :
         {"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "READONLY", "CLUSTERDOWN"})
        if (word == passing)
            return true;
    return false;
}

std::string_view to_string(error e) noexcept {
    switch (e) {
    case error::timeout:
        return "timeout";
    case error::lock_lost:
        return "lock_lost";
    case error::invalid_argument:
        return "invalid_argument";
    case error::unexpected_reply:
        return "unexpected_reply";
    case error::not_held:
        return "not_held";
    case error::replicas_not_acknowledged:
        return "replicas_not_acknowledged";
    case error::no_quorum:
        return "no_quorum";
    case error::stale_fence:
        return "stale_fence";
    }
    return "unknown";
}

namespace detail {

namespace asio = boost::asio;

bool is_transient(error_code ec, std::string_view server_text) {
    if (ec == redis::error::server_error)
        return is_transient_server_error(server_text);
    return ec == redis::error::connection_lost || ec == redis::error::health_check_timeout ||
           ec == error::no_quorum;
}

bool is_connect_failure(error_code ec) {
    if (!ec || ec == asio::error::operation_aborted || ec.category() == error_category())
        return false;
    if (ec.category() == redis::error_category())
        return ec == redis::error::connect_timeout || ec == redis::error::handshake_failed;
    return true; // system, resolver, end of stream, TLS
}

std::exception_ptr failure_exception(error_code ec, std::string_view message) {
    if (message.empty())
        return std::make_exception_ptr(system_error(ec));
    // As the awaitable forms throw (awaited_call.hpp): a connection never established throws
    // redis::connect_error, whose what() is the message alone.
    if (is_connect_failure(ec))
        return std::make_exception_ptr(redis::connect_error(ec, std::string(message)));
    return std::make_exception_ptr(system_error(ec, std::string(message)));
}

bool is_lasting_connect_failure(error_code ec) {
    return ec == redis::error::handshake_failed || ec.category() == asio::error::get_ssl_category();
}

std::string attempt_failure_text(boost::system::error_code ec, std::string const& server_text,
                                 lock_options const& opt, bool waited,
                                 std::string const& last_error) {
    if (!is_connect_failure(ec))
        return server_text;
    std::string const why = last_error.empty() ? ec.message() : last_error;
    if (!waited || is_lasting_connect_failure(ec))
        return fmt::format("no connection to the Redis server: {}", why);
    auto budget = opt.first_connect_timeout;
    if (opt.wait_timeout)
        budget = std::min(budget, *opt.wait_timeout);
    return fmt::format("no connection to the Redis server within {} ms: {}", budget.count(), why);
}

std::string with_acl_pointer(std::string text, std::string_view kind) {
    if (text.find("can't run this command") != std::string::npos)
        return fmt::format("{} (the ACL user lacks a command the {}'s scripts call; "
                           "docs/operations.md, \"ACL permissions\", lists them)",
                           text, kind);
    if (text.starts_with("NOPERM") ||
        text.find("The user executing the script can't") != std::string::npos)
        return fmt::format("{} (docs/operations.md, \"ACL permissions\", lists what {}s need)",
                           text, kind);
    return text;
}

std::string wait_timeout_text(lock_options const& opt, bool connected,
                              std::string const& last_error) {
    std::string text = fmt::format("not acquired within {} ms", opt.wait_timeout->count());
    if (connected)
        return text;
    return last_error.empty() ? text + "; the connection to the Redis server is not established"
                              : fmt::format("{}; the connection to the Redis server is not "
                                            "established: {}",
                                            text, last_error);
}

} // namespace detail

} // namespace colock
