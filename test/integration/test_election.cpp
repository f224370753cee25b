// Leader election against a real server: campaigns queue FIFO across lockers, a resign hands
// leadership on at once, co_leader names the leader, a watch sees every change in order, and a
// leader that stops renewing is followed when its lease lapses.
#include <colock/election.hpp>

#include "election_fixture.hpp"
#include "lock_fixture.hpp"
#include "proxy_fixture.hpp"
#include "test_util.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

using namespace colock;
using namespace colock::test;
using namespace boost::asio::experimental::awaitable_operators;

namespace {

// Polls LLEN of election `name`'s queue of candidates' lockers until it is `expected`.
asio::awaitable<std::int64_t> candidates_queued(redis::connection& probe, std::string const& name,
                                                std::int64_t expected) {
    co_return co_await becomes(
        [&] { return integer(probe, command("LLEN", election_key(name) + ":q")); }, expected,
        3000ms);
}

} // namespace

TEST_CASE("election: co_leader names the leader; a second candidate waits, and leads at once "
          "when the first resigns, with a higher term; nothing is left behind") {
    run_lock_test<two_lockers>(
        "election-handover",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            election ea{a, name};
            election eb{b, name};
            CHECK_FALSE((co_await eb.co_leader()).has_value());

            auto lead_a = co_await ea.co_campaign("node-a", lease(5000ms));
            CHECK(lead_a.owns());
            CHECK(lead_a.value() == "node-a");
            CHECK(lead_a.name() == name);
            auto const who = co_await eb.co_leader();
            REQUIRE(who.has_value());
            CHECK(who->value == "node-a");
            CHECK(who->term == lead_a.term());
            CHECK(who->holder_id.size() == 16);
            REQUIRE(who->holder.has_value());
            CHECK(who->holder->pid == ::getpid());
            CHECK(who->ttl > 4000ms);
            CHECK(who->ttl <= 5000ms);

            campaign_run second;
            start_campaign(co_await asio::this_coro::executor, eb, "node-b", lease(5000ms), second);
            CHECK(co_await candidates_queued(probe, name, 1) == 1);
            CHECK_FALSE(second.done); // queued behind the leader

            auto const resigned_at = steady::now();
            CHECK(co_await lead_a.release());
            CHECK_FALSE(lead_a.owns());
            REQUIRE(co_await finishes(second.done, 2000ms));
            REQUIRE(second.lead.has_value());
            CHECK(second.lead->term() > lead_a.term());
            // The acceptance bound of a hand-over (the release hands the lock to the queued
            // locker, which claims it and proclaims its term: a few round trips) is on the
            // median of five, each bounded too: one stall of a loaded machine is no failure.
            std::vector<long long> took{ms_between(resigned_at, second.at)};
            leadership current = std::move(*second.lead);
            for (int i = 0; i < 4; ++i) {
                campaign_run next;
                start_campaign(co_await asio::this_coro::executor, i % 2 == 0 ? ea : eb,
                               i % 2 == 0 ? "node-a" : "node-b", lease(5000ms), next);
                CHECK(co_await candidates_queued(probe, name, 1) == 1);
                CHECK_FALSE(next.done);
                auto const at = steady::now();
                CHECK(co_await current.release());
                REQUIRE(co_await finishes(next.done, 2000ms));
                REQUIRE(next.lead.has_value());
                took.push_back(ms_between(at, next.at));
                CHECK(next.lead->term() > current.term());
                current = std::move(*next.lead);
            }
            for (auto const t : took)
                CHECK(t < 1000);
            std::sort(took.begin(), took.end());
            CHECK(took[2] < 50);
            auto const now_leads = co_await ea.co_leader();
            REQUIRE(now_leads.has_value());
            CHECK(now_leads->value == "node-b");
            CHECK(now_leads->term == current.term());

            CHECK(co_await current.release());
            CHECK_FALSE(co_await current.release()); // once
            CHECK_FALSE((co_await ea.co_leader()).has_value());
            // The record went with the term; the lock key lapses with the rest of the lease.
            CHECK(co_await exists_becomes(probe, election_key(name) + ":e", 0, 1000ms) == 0);
        });
}

TEST_CASE("election: a watch sees the state it starts in, then every change in order: a "
          "leader, its new value, a hand-over, and nobody leading after a resign") {
    run_lock_test<two_lockers>(
        "election-watch",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            election ea{a, name};
            election eb{b, name};
            auto w = eb.observe();
            auto first = co_await next_change(w);
            CHECK_FALSE(first.leading);
            CHECK_FALSE(first.resynced);

            auto lead_a = co_await ea.co_campaign("a1", lease(5000ms));
            auto c = co_await next_change(w);
            CHECK(c.leading);
            CHECK(c.value == "a1");
            CHECK(c.term == lead_a.term());
            CHECK_FALSE(c.resynced);

            co_await lead_a.co_proclaim("a2");
            CHECK(lead_a.value() == "a2");
            c = co_await next_change(w);
            CHECK(c.leading);
            CHECK(c.value == "a2");
            CHECK(c.term == lead_a.term());
            auto const who = co_await eb.co_leader();
            REQUIRE(who.has_value());
            CHECK(who->value == "a2");
            co_await lead_a.co_proclaim("a2"); // the same value again: no change to report
            CHECK(co_await quiet_for(w, 100ms));

            campaign_run second;
            start_campaign(co_await asio::this_coro::executor, eb, "b1", lease(5000ms), second);
            CHECK(co_await candidates_queued(probe, name, 1) == 1);
            CHECK(co_await lead_a.release());
            c = co_await next_change(w); // straight to the next leader: somebody was queued
            CHECK(c.leading);
            CHECK(c.value == "b1");
            REQUIRE(co_await finishes(second.done, 2000ms));
            CHECK(c.term == second.lead->term());
            CHECK(c.term > lead_a.term());

            CHECK(co_await second.lead->release());
            c = co_await next_change(w);
            CHECK_FALSE(c.leading);
            CHECK(c.term == second.lead->term());
            CHECK(co_await quiet_for(w, 100ms));

            // A proclaim after the term ended is refused, naming the election.
            auto const f = co_await failure_of(lead_a.co_proclaim("late"));
            CHECK(f.code == error::lock_lost);
            CHECK(f.what.find("election '" + name + "'") != std::string::npos);
            // A watch closed while a co_next waits: that one ends with operation_aborted, the
            // next ones return nothing.
            bool aborted = false;
            asio::co_spawn(
                co_await asio::this_coro::executor,
                [&]() -> asio::awaitable<void> {
                    auto const pending = co_await failure_of(w.co_next());
                    aborted = pending.code == asio::error::operation_aborted;
                },
                asio::detached);
            co_await sleep_for(20ms);
            w.close();
            CHECK(co_await finishes(aborted, 1000ms));
            CHECK_FALSE((co_await w.co_next()).has_value());
        });
}

TEST_CASE("election: a leader that stops renewing (as a dead process) is followed when its "
          "lease lapses; it learns of the loss first; the watch sees nobody, then the next") {
    run_lock_test<two_lockers>(
        "election-lapse",
        [](redis::connection&, redis::connection&, redis::connection&, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            election ea{a, name};
            election eb{b, name};
            auto w = co_await watch_from_nobody(eb);

            auto opt = lease(600ms);
            opt.auto_renew = false;
            auto lead_a = co_await ea.co_campaign("a", opt);
            auto const granted = steady::now();
            CHECK((co_await next_change(w)).value == "a");
            lost_watch lost;
            watch(lead_a.guard(), lost);

            campaign_run second;
            start_campaign(co_await asio::this_coro::executor, eb, "b", lease(5000ms), second);
            REQUIRE(co_await finishes(second.done, 2000ms));
            // Within the ttl and 100 ms of the last grant.
            CHECK(ms_between(granted, second.at) < 700);
            REQUIRE(lost.done);
            CHECK(lost.at <= second.at); // the old leader knew before the new one led
            CHECK(second.lead->term() > lead_a.term());

            auto c = co_await next_change(w);
            if (!c.leading) { // nobody led between the lapse and the next claim
                CHECK(c.term == lead_a.term());
                c = co_await next_change(w);
            }
            CHECK(c.leading);
            CHECK(c.value == "b");
            CHECK(c.term == second.lead->term());
            CHECK(co_await second.lead->release());
        });
}

namespace {

// Campaign options that ask again every 2 ms or less while they wait.
lock_options eager_campaign() {
    auto opt = lease(10'000ms);
    opt.retry.initial = 2ms;
    opt.retry.max = 2ms;
    return opt;
}

// Waits for the first of `first` and `then` to lead, CHECKs that it is `first`, and lets each
// resign in turn (whichever leads), each term above the one before.
asio::awaitable<void> check_lead_in_order(campaign_run& first, campaign_run& then,
                                          std::int64_t old_term) {
    bool const one = co_await finishes_when([&] { return first.done || then.done; }, 3000ms);
    REQUIRE(one);
    CHECK(first.done);
    CHECK_FALSE(then.done);
    auto& leader = first.done ? first : then;
    auto& next = first.done ? then : first;
    REQUIRE(leader.lead.has_value());
    CHECK(leader.lead->term() > old_term);
    CHECK(co_await leader.lead->release());
    REQUIRE(co_await finishes(next.done, 2000ms));
    REQUIRE(next.lead.has_value());
    CHECK(next.lead->term() > leader.lead->term());
    CHECK(co_await next.lead->release());
}

} // namespace

TEST_CASE("election: a leader's lease lapses (a dead leader): the first queued candidate leads, "
          "not a later one that asks first") {
    auto scenario = [](asio::io_context& ctx, redis::connection&, redis::connection& conn_b,
                       redis::connection&, redis::connection& probe, locker& a, locker& b,
                       locker& c, std::string const& name) -> asio::awaitable<void> {
        election ea{a, name};
        election eb{b, name};
        election ec{c, name};
        auto dying = lease(800ms);
        dying.auto_renew = false; // as a leader that died
        auto lead_a = co_await ea.co_campaign("a", dying);
        auto const granted = steady::now();

        campaign_run second, third;
        start_campaign(ctx.get_executor(), eb, "b", lease(10'000ms), second);
        auto const b_queued = co_await candidates_queued(probe, name, 1);
        REQUIRE(b_queued == 1);
        start_campaign(ctx.get_executor(), ec, "c", eager_campaign(), third);
        auto const c_queued = co_await candidates_queued(probe, name, 2);
        REQUIRE(c_queued == 2);
        // B asks only 400 ms after the lapse; C is the first to ask after it.
        auto const lapse_in = 800ms - std::chrono::milliseconds(ms_since(granted));
        auto const stalled =
            co_await stall_at_server(conn_b, probe, std::max(lapse_in, 0ms) + 400ms);
        auto const still_leads = co_await integer(probe, command("EXISTS", election_key(name)));
        REQUIRE(still_leads == 1); // B was held up before the lease lapsed

        co_await check_lead_in_order(second, third, lead_a.term());
        CHECK(co_await finishes(stalled->done, 2000ms));
    };
    run_lock_test<three_lockers>("election-lapse-fifo", scenario);
}

TEST_CASE("election: after a forced unlock, the first queued candidate leads, not the ousted "
          "leader campaigning again") {
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        auto const cfg = shared_server().config();
        redis::connection conn_a{ctx.get_executor(), cfg};
        redis::connection conn_b{ctx.get_executor(), cfg};
        redis::connection probe{ctx.get_executor(), cfg};
        locker a{conn_a};
        locker b{conn_b};
        locker forcer{probe, "colock:election:"}; // as `colock unlock --force` with that prefix
        std::string const name = unique_key("election-forced-fifo");
        election ea{a, name};
        election eb{b, name};
        // Renewed every 200 ms: told of the forced unlock at its next renewal (a forced unlock
        // under the election's prefix does not tell the leader's locker; see docs/tool.md).
        auto lead_a = co_await ea.co_campaign("a", lease(600ms));
        lost_watch lost;
        watch(lead_a.guard(), lost);

        campaign_run second, again;
        start_campaign(ctx.get_executor(), eb, "b", lease(10'000ms), second);
        auto const b_queued = co_await candidates_queued(probe, name, 1);
        REQUIRE(b_queued == 1);
        // The forced unlock hands the lock to nobody for what the lease had left (600 ms at
        // most); B asks only 400 ms after that.
        auto const stalled = co_await stall_at_server(conn_b, probe, 1000ms);
        CHECK(co_await forcer.co_force_unlock(name));
        REQUIRE(co_await finishes(lost.done, 1000ms));
        // The ousted leader campaigns again at once, asking every 2 ms or less: queued behind B
        // (the key is handed to nobody), and the first to ask when that is over.
        start_campaign(ctx.get_executor(), ea, "a", eager_campaign(), again);
        auto const a_queued = co_await candidates_queued(probe, name, 2);
        REQUIRE(a_queued == 2);

        co_await check_lead_in_order(second, again, lead_a.term());
        CHECK(co_await finishes(stalled->done, 2000ms));
        conn_a.close();
        conn_b.close();
        probe.close();
    });
}

TEST_CASE("election: a forced unlock ends the term at once for every watch, not when its record "
          "would have lapsed") {
    run_lock_test<two_lockers>(
        "election-forced-watch",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            election ea{a, name};
            election eb{b, name};
            auto w = co_await watch_from_nobody(eb);
            auto lead = co_await ea.co_campaign("a", lease(10'000ms));
            CHECK((co_await next_change(w)).leading);
            locker forcer{probe, "colock:election:"}; // as `colock unlock --force` does
            auto const forced = steady::now();
            CHECK(co_await forcer.co_force_unlock(name));
            auto const gone = co_await next_change(w, 1000ms);
            CHECK_FALSE(gone.leading);
            CHECK(gone.term == lead.term());
            CHECK(ms_since(forced) < 1000);
            CHECK_FALSE(holds_key(shared_server(), election_key(name) + ":e"));
            CHECK_FALSE((co_await eb.co_leader()).has_value());
        });
}

TEST_CASE("election: a forced resign tells the leader and every watch at once; the first queued "
          "candidate leads with a higher term; with nobody leading it ends nothing") {
    run_lock_test<two_lockers>(
        "election-force-resign",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            election ea{a, name};
            election eb{b, name};
            locker operator_locks{probe}; // another process, as `colock resign --force`
            election forcer{operator_locks, name};
            auto w = co_await watch_from_nobody(eb);
            // A 30 s lease, renewed every 10 s: only the forced message can tell it in time.
            auto lead = co_await ea.co_campaign("a", lease(30'000ms));
            CHECK((co_await next_change(w)).leading);
            lost_watch lost;
            watch(lead.guard(), lost);
            campaign_run second;
            start_campaign(asio::any_io_executor(co_await asio::this_coro::executor), eb, "b",
                           lease(10'000ms), second);
            auto const queued = co_await candidates_queued(probe, name, 1);
            REQUIRE(queued == 1);

            auto const forced = steady::now();
            bool const ended = co_await forcer.async_force_resign(asio::use_awaitable);
            CHECK(ended);
            REQUIRE(co_await finishes(lost.done, 1000ms));
            CHECK(ms_between(forced, lost.at) < 1000);
            CHECK(lead.loss() == loss_reason::forced);
            CHECK_FALSE(lead.owns());
            auto const gone = co_await next_change(w, 1000ms);
            CHECK_FALSE(gone.leading);
            CHECK(gone.term == lead.term());
            CHECK(ms_since(forced) < 1000);

            // The quarantine (at most a second) over, the queued candidate leads.
            REQUIRE(co_await finishes(second.done, 3000ms));
            REQUIRE(second.lead.has_value());
            CHECK(second.lead->term() > lead.term());
            auto const next = co_await next_change(w);
            CHECK(next.leading);
            CHECK(next.value == "b");
            CHECK_FALSE(co_await lead.release()); // the ousted leader's resign touches nothing
            CHECK(second.lead->owns());
            CHECK(co_await second.lead->release());
            CHECK_FALSE((co_await next_change(w)).leading);
            CHECK_FALSE(co_await forcer.co_force_resign());
        });
}

TEST_CASE("election: a leader's lease lapses with nobody queued: the watch sees nobody at the "
          "lapse; a leadership destroyed resigns; a cancelled campaign leaves nothing") {
    run_lock_test<two_lockers>(
        "election-alone",
        [](redis::connection&, redis::connection&, redis::connection& probe, locker& a, locker& b,
           std::string const& name) -> asio::awaitable<void> {
            election ea{a, name};
            election eb{b, name};
            auto w = co_await watch_from_nobody(eb);

            auto opt = lease(400ms);
            opt.auto_renew = false;
            auto const start = steady::now();
            {
                auto lead = co_await ea.co_campaign("a", opt);
                CHECK((co_await next_change(w)).leading);
                auto c = co_await next_change(w, 2000ms);
                CHECK_FALSE(c.leading);
                CHECK(c.term == lead.term());
                CHECK(ms_since(start) >= 400);
                CHECK(ms_since(start) < 2000);
            }
            {
                auto lead = co_await ea.co_campaign("a", lease(5000ms));
                CHECK((co_await next_change(w)).leading);
            } // destroyed: resigned in the background
            auto c = co_await next_change(w);
            CHECK_FALSE(c.leading);

            // A campaign cancelled while it waits leaves no queue entry and no term behind.
            auto lead_b = co_await eb.co_campaign("b", lease(5000ms));
            CHECK((co_await next_change(w)).value == "b");
            asio::steady_timer timer(co_await asio::this_coro::executor, 200ms);
            auto r = co_await (ea.co_campaign("a", lease(5000ms)) ||
                               timer.async_wait(asio::use_awaitable));
            CHECK(r.index() == 1);
            CHECK(co_await lead_b.release());
            c = co_await next_change(w);
            CHECK_FALSE(c.leading);
            CHECK(co_await exists_becomes(probe, election_key(name) + ":q", 0, 1000ms) == 0);
            CHECK_FALSE((co_await ea.co_leader()).has_value());
        });
}

TEST_CASE("election: a watch whose connection was lost reads the election again when it is back, "
          "and says that changes may have been missed") {
    fault_proxy proxy{shared_server().port()};
    run_test([&](asio::io_context& ctx) -> asio::awaitable<void> {
        redis::connection conn_a{ctx.get_executor(), shared_server().config()};
        redis::connection conn_w{ctx.get_executor(), through(proxy)};
        locker a{conn_a};
        locker watcher{conn_w};
        std::string const name = unique_key("election-resync");
        election ea{a, name};
        election ew{watcher, name};
        auto w = co_await watch_from_nobody(ew);
        auto lead = co_await ea.co_campaign("a1", lease(5000ms));
        CHECK((co_await next_change(w)).value == "a1");

        proxy.set_black_hole(true);
        proxy.drop_connections();
        REQUIRE(co_await eventually([&] { return !conn_w.is_connected(); }));
        co_await lead.co_proclaim("a2"); // missed
        CHECK(co_await lead.release());
        auto next = co_await ea.co_campaign("a3", lease(5000ms)); // missed too
        proxy.set_black_hole(false);
        auto c = co_await next_change(w, 5000ms);
        CHECK(c.leading);
        CHECK(c.value == "a3");
        CHECK(c.term == next.term());
        CHECK(c.resynced);
        // And live again: the next change comes as a message.
        co_await next.co_proclaim("a4");
        c = co_await next_change(w);
        CHECK(c.value == "a4");
        CHECK_FALSE(c.resynced);
        CHECK(co_await next.release());
        CHECK_FALSE((co_await next_change(w)).leading);
        conn_a.close();
        conn_w.close();
    });
}

TEST_CASE("election: two candidates of one locker: the second leads when the first resigns, "
          "with a term the server granted (no cohort hand-off)") {
    run_lock_test<one_locker>(
        "election-one-process",
        [](redis::connection&, redis::connection&, locker& locks,
           std::string const& name) -> asio::awaitable<void> {
            election first{locks, name};
            election second{locks, name};
            auto w = co_await watch_from_nobody(first);
            auto lead = co_await first.co_campaign("one", lease(5000ms));
            CHECK((co_await next_change(w)).value == "one");
            campaign_run next;
            start_campaign(co_await asio::this_coro::executor, second, "two", lease(5000ms), next);
            CHECK(co_await stays([&] { return !next.done; }, 100ms));
            auto const resigned_at = steady::now();
            CHECK(co_await lead.release());
            auto const c = co_await next_change(w);
            CHECK(c.value == "two");
            REQUIRE(co_await finishes(next.done, 2000ms));
            CHECK(ms_between(resigned_at, next.at) < 1000); // the 50 ms bound: on a median, above
            CHECK(next.lead->term() > lead.term());
            CHECK(c.term == next.lead->term());
            auto const who = co_await first.co_leader();
            REQUIRE(who);
            CHECK(who->term == next.lead->term()); // the server's record has the new term
            CHECK(co_await next.lead->release());
        });
}

TEST_CASE("election: an ACL user with the lock's permissions and the election's: campaign, "
          "co_leader, a watch, renewal, proclaim, hand-over, resign; without one of them, the "
          "campaign fails with the server's refusal and where the list is") {
    set_lock_user(shared_server(), "electuser", strings("+hmget", "+pexpireat", "+pexpiretime"));
    set_lock_user(shared_server(), "electnoexpiretime", strings("+hmget", "+pexpireat"));
    run_test([](asio::io_context& ctx) -> asio::awaitable<void> {
        auto const as = [](std::string user) { return as_user(shared_server(), std::move(user)); };
        redis::connection conn_a{ctx.get_executor(), as("electuser")};
        redis::connection conn_b{ctx.get_executor(), as("electuser")};
        redis::connection conn_c{ctx.get_executor(), as("electnoexpiretime")};
        locker a{conn_a}, b{conn_b}, c{conn_c};
        auto const name = unique_key("election-acl");
        // So that FUNCTION LOAD (or SCRIPT LOAD) is needed too.
        shared_server().cli(strings("FUNCTION", "FLUSH"));
        shared_server().cli(strings("SCRIPT", "FLUSH"));
        election ea{a, name}, eb{b, name};
        lock_options opt = lease(600ms);
        opt.renew_interval = 200ms;

        auto w = co_await watch_from_nobody(eb); // subscribes to the election's channel
        auto lead_a = co_await ea.co_campaign("a1", opt);
        auto ch = co_await next_change(w);
        CHECK(ch.leading);
        CHECK(ch.value == "a1");
        auto const who = co_await eb.co_leader();
        REQUIRE(who.has_value());
        CHECK(who->value == "a1");
        REQUIRE(who->holder.has_value()); // the leader's locker record, read as status reads it
        // Renewed past its lease: the record too.
        CHECK(co_await stays([&] { return lead_a.owns(); }, 900ms));
        CHECK(co_await lead_a.guard().extend(400ms)); // a shorter lease, told on the channel
        co_await lead_a.co_proclaim("a2");
        ch = co_await next_change(w);
        CHECK(ch.leading);
        CHECK(ch.value == "a2");

        campaign_run second;
        start_campaign(co_await asio::this_coro::executor, eb, "b1", opt, second);
        CHECK(co_await eventually(
            [&] { return shared_server().cli(strings("LLEN", election_key(name) + ":q")) == "1"; },
            3000ms));
        CHECK_FALSE(second.done);
        CHECK(co_await lead_a.release()); // handed to the queued candidate
        ch = co_await next_change(w);
        CHECK(ch.leading);
        CHECK(ch.value == "b1");
        REQUIRE(co_await finishes(second.done, 2000ms));
        CHECK(co_await second.lead->release());
        ch = co_await next_change(w);
        CHECK_FALSE(ch.leading);
        w.close();

        // A leader's lease that lapses (a dead leader) with a candidate queued: the lapsed lock
        // goes to the queue's head.
        auto dying = lease(600ms);
        dying.auto_renew = false;
        auto dead = co_await ea.co_campaign("a3", dying);
        campaign_run after_lapse;
        start_campaign(co_await asio::this_coro::executor, eb, "b2", opt, after_lapse);
        REQUIRE(co_await finishes(after_lapse.done, 3000ms));
        REQUIRE(after_lapse.lead.has_value());
        CHECK(after_lapse.lead->term() > dead.term());
        CHECK(co_await after_lapse.lead->release());

        // Without PEXPIRETIME, which the claim of a term calls: the server's refusal (Redis does
        // not name the command a script was refused), naming the election and where the list
        // of commands is; the term's record does not stay behind.
        election ec{c, name};
        auto const refused = co_await failure_of(ec.co_campaign("c1", opt));
        CHECK(refused.code == redis::error::server_error);
        CHECK(refused.what.find("can't run this command") != std::string::npos);
        CHECK(refused.what.find("election '" + name + "'") != std::string::npos);
        CHECK(refused.what.find("docs/operations.md") != std::string::npos);
        CHECK(refused.what.find("ACL permissions") != std::string::npos);
        // Not even for a moment: the refused script wrote nothing.
        CHECK_FALSE(holds_key(shared_server(), election_key(name) + ":e"));
        conn_a.close();
        conn_b.close();
        conn_c.close();
    });
    for (auto const* user : {"electuser", "electnoexpiretime"})
        shared_server().cli(strings("ACL", "DELUSER", user));
}
