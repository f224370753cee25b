// colock elect and colock leader: run a command while leading an election; show who leads,
// once or at every change.
#include "cli.hpp"
#include "supervise.hpp"
#include "text.hpp"

#include <colock/election.hpp>
#include <colock/error.hpp>

#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <optional>
#include <string>

namespace colock::cli {

namespace {

namespace asio = boost::asio;
using std::chrono::milliseconds;

// elect's value unless --value: "<host>:<pid>", this process's.
std::string default_value() {
    char host[HOST_NAME_MAX + 1] = {};
    if (gethostname(host, sizeof host - 1) != 0)
        host[0] = '\0';
    return fmt::format("{}:{}", host[0] != '\0' ? host : "localhost", getpid());
}

// A best-effort account of who leads, for the message of a campaign that timed out:
// " (led by VALUE, term N: PROGRAM pid N on HOST)", or nothing.
asio::awaitable<std::string> leader_text(election& el) {
    try {
        auto const who = co_await el.co_leader();
        if (who && who->holder)
            co_return fmt::format(" (led by {}, term {}: {} pid {} on {})", printable(who->value),
                                  who->term, printable(who->holder->program), who->holder->pid,
                                  printable(who->holder->host));
        if (who)
            co_return fmt::format(" (led by {}, term {})", printable(who->value), who->term);
    } catch (std::exception const&) {
    }
    co_return std::string{};
}

// The time left on a leader's lease: nothing when the server gave none (no key, or no expiry).
std::optional<milliseconds> ttl_left(leader_info const& who) {
    if (who.ttl.count() < 0)
        return std::nullopt;
    return who.ttl;
}

std::string leader_json(std::string const& name, std::optional<leader_info> const& who) {
    if (!who)
        return fmt::format(R"({{"name":{},"leading":false,"value":null,"term":null,)"
                           R"("ttl_ms":null,"holder_id":null,"holder":null}})",
                           json_string(name));
    auto const ttl = ttl_left(*who);
    return fmt::format(R"({{"name":{},"leading":true,"value":{},"term":{},"ttl_ms":{},)"
                       R"("holder_id":{},"holder":{}}})",
                       json_string(name), json_string(who->value), who->term,
                       ttl ? std::to_string(ttl->count()) : std::string("null"),
                       json_or_null(who->holder_id),
                       who->holder ? holder_json(*who->holder) : std::string("null"));
}

void print_leader_text(std::string const& name, std::optional<leader_info> const& who) {
    print_field("election", printable(name));
    if (!who) {
        print_field("leader", "none");
        return;
    }
    print_field("leader", printable(who->value));
    print_field("term", std::to_string(who->term));
    if (!who->holder_id.empty())
        print_field("holder id", printable(who->holder_id));
    if (who->holder)
        print_holder_fields(*who->holder);
    auto const ttl = ttl_left(*who);
    print_field("ttl", ttl ? format_duration(*ttl) : std::string("-"));
}

// One line of --watch: "TIME leader term N[ (resynced)]: VALUE" or "TIME no leader[ (term N
// ended)][ (resynced)]"; the value comes last, after the first ": ".
std::string change_text(leader_change const& c) {
    auto const now = iso8601(std::chrono::system_clock::now());
    if (c.leading)
        return fmt::format("{} leader term {}{}: {}", now, c.term, c.resynced ? " (resynced)" : "",
                           printable(c.value));
    std::string out = now + " no leader";
    if (c.term != 0 && c.resynced)
        out += fmt::format(" (term {} ended; resynced)", c.term);
    else if (c.term != 0)
        out += fmt::format(" (term {} ended)", c.term);
    else if (c.resynced)
        out += " (resynced)";
    return out;
}

std::string change_json(std::string const& name, leader_change const& c) {
    return fmt::format(R"({{"time":{},"name":{},"leading":{},"value":{},"term":{},"resynced":{}}})",
                       json_string(iso8601(std::chrono::system_clock::now())), json_string(name),
                       c.leading, c.leading ? json_string(c.value) : std::string("null"),
                       c.term != 0 ? std::to_string(c.term) : std::string("null"), c.resynced);
}

// leader --watch: the state now, then every change, until a signal.
asio::awaitable<int> watch_leader(options const& o, election& el) {
    tool_signals sigs{co_await asio::this_coro::executor, false};
    leader_watch watch = el.observe();
    for (;;) {
        auto got = co_await or_signal(watch.co_next(), sigs.stop);
        if (got.signal != 0)
            co_return exit_ok;
        auto const& change = *got.value;
        if (!change) {
            complain(fmt::format("the watch of election '{}' ended: the connection was closed",
                                 printable(o.name)));
            co_return exit_failure;
        }
        fmt::print("{}\n", o.json ? change_json(o.name, *change) : change_text(*change));
        std::fflush(stdout); // a reader of a pipe sees each change as it comes
    }
}

} // namespace

asio::awaitable<int> run_elect(options const& o, redis::connection& conn, locker& lk) {
    // Caught from here on: while campaigning, they end the campaign; while the command runs,
    // they are passed on to it.
    tool_signals sigs{co_await asio::this_coro::executor, true};
    election el{lk, o.name};
    lock_options lo;
    lo.ttl = o.ttl;
    lo.wait_timeout = o.wait;

    // Not inside the co_await below: GCC 12 loses the conditional's temporary there (the
    // campaign then read a garbage string).
    std::string value = o.value ? *o.value : default_value();

    raced<leadership> got;
    bool timed_out = false;
    try {
        got = co_await or_signal(el.co_campaign(std::move(value), lo), sigs.stop);
    } catch (boost::system::system_error const& e) {
        if (e.code() != colock::error::timeout)
            throw;
        timed_out = true;
    }
    if (got.signal != 0) {
        co_await let_queue_exit_go_out(conn);
        co_return 128 + got.signal;
    }
    if (timed_out) {
        auto const leader = co_await leader_text(el);
        if (o.wait->count() == 0)
            complain(
                fmt::format("election '{}' is led by someone else{}", printable(o.name), leader));
        else
            complain(fmt::format("not leading election '{}' within {}{}", printable(o.name),
                                 format_duration(*o.wait), leader));
        co_return exit_not_acquired;
    }
    leadership& lead = *got.value;
    auto const name = printable(o.name);
    lease_words const words{
        fmt::format("the leadership of election '{}' (term {})", name, lead.term()),
        fmt::format("resign the leadership of election '{}'", name)};
    // Unlocking the leadership's guard resigns.
    guard_lease lease{lead.guard()};
    // Named, not a temporary in the co_await: GCC 12 destroys such a temporary twice.
    lease_identity const identity{o.name, std::to_string(lead.term()), lead.guard().token()};
    co_return co_await run_under_lease(o, lease, words, identity, sigs);
}

asio::awaitable<int> run_leader(options const& o, locker& lk) {
    election el{lk, o.name};
    if (o.watch)
        co_return co_await watch_leader(o, el);
    auto const who = co_await el.co_leader();
    if (o.json)
        fmt::print("{}\n", leader_json(o.name, who));
    else
        print_leader_text(o.name, who);
    co_return who ? exit_ok : exit_no;
}

asio::awaitable<int> run_resign(options const& o, locker& lk) {
    election el{lk, o.name};
    // Who led, for the message; the leadership may change hands in between, which the answer
    // of the forced resign itself tells.
    std::string leader;
    try {
        if (auto const who = co_await el.co_leader()) {
            leader = fmt::format(" (term {}, value '{}'", who->term, printable(who->value));
            if (who->holder)
                leader += fmt::format(", {} pid {} on {}", printable(who->holder->program),
                                      who->holder->pid, printable(who->holder->host));
            leader += ")";
        }
    } catch (std::exception const&) {
    }
    if (co_await el.co_force_resign()) {
        fmt::print("ended the leadership of election '{}'{}\n", printable(o.name), leader);
        co_return exit_ok;
    }
    fmt::print("nobody led election '{}': no term to end\n", printable(o.name));
    co_return exit_no;
}

} // namespace colock::cli
