// The election's worker modes: lead (one campaign, then leading, stepping and following
// commands), campaign (campaigns again and again, journaled) and observe (a leader_watch that
// says every change). See worker.cpp.
#include "election_journal.hpp"
#include "worker_support.hpp"

#include <colock/colock.hpp>
#include <colock_test/history.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace colock::reliability {

namespace {

using namespace asio::experimental::awaitable_operators;

// A leader's steps: every `step` it asks owns(), saying "step NS LEADS LOST", and stops
// asking at the first step that finds it does not lead. Returns only when cancelled.
asio::awaitable<void> lead_steps(leadership& lead, milliseconds step) {
    asio::steady_timer timer(co_await asio::this_coro::executor);
    for (bool leads = true; leads;) {
        timer.expires_after(step);
        if (auto [ec] = co_await timer.async_wait(use_tuple); ec)
            co_return;
        leads = lead.owns();
        say(fmt::format("step {} {} {}", steady_now_ns(), leads ? 1 : 0,
                        lead.guard().lost() ? 1 : 0));
    }
    timer.expires_at(std::chrono::steady_clock::time_point::max());
    co_await timer.async_wait(use_tuple);
}

// The campaign mode's settings.
struct campaign_plan {
    std::string proc;
    std::int64_t first = 0;
    std::int64_t campaigns = 0;
    steady_clock_deadline until;
    milliseconds hold_min, hold_max, step, pause_max;
    int resign_percent = 0;
    int proclaim_percent = 0;
};

struct campaign_tally {
    std::uint64_t campaigns = 0, leads = 0, over_at_return = 0, errors = 0, timeouts = 0,
                  losses = 0, resigns = 0, resign_errors = 0, drops = 0, proclaims = 0,
                  proclaim_errors = 0, writes = 0, refused = 0;
};

// One campaign of the campaign mode: leads (when it gets to), holds with steps that write the
// fenced store while it leads, maybe proclaims a new value, then resigns or drops the
// leadership, or finds it lost. Everything is journaled before it is done.
asio::awaitable<void> one_campaign(election& el, lock_options opt, std::string const& id,
                                   campaign_plan const& plan, std::minstd_rand& rng,
                                   election_journal_writer& journal,
                                   colock::test::history_writer& history,
                                   colock::test::fenced_store& store, campaign_tally& t) {
    auto pick = [&rng](std::int64_t lo, std::int64_t hi) {
        return lo + static_cast<std::int64_t>(rng() % static_cast<unsigned>(hi - lo + 1));
    };
    ++t.campaigns;
    opt.wait_timeout = std::chrono::duration_cast<milliseconds>(std::max(
        plan.until - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(1ms)));
    journal.campaigning(id);
    std::optional<leadership> lead;
    error_code failure;
    try {
        lead = co_await el.co_campaign(campaign_value(id, 0), opt);
    } catch (boost::system::system_error const& e) {
        failure = e.code();
    }
    if (failure) {
        journal.failed(id);
        if (failure == colock::error::timeout) {
            ++t.timeouts;
        } else {
            ++t.errors;
            co_await sleep_for(5ms); // the connection is being re-established
        }
        co_return;
    }
    auto const acquired_ns = steady_now_ns();
    ++t.leads;
    journal.granted(id, lead->term(), lead->guard().token(), acquired_ns);
    // A reply held up past the lease's end (a stalled connection) returns a term already over.
    bool lost = !lead->owns();
    t.over_at_return += lost ? 1 : 0;
    auto const hold_end = std::chrono::steady_clock::now() +
                          milliseconds(pick(plan.hold_min.count(), plan.hold_max.count()));
    bool const proclaim = pick(1, 100) <= plan.proclaim_percent;
    std::size_t index = 0;
    while (!lost && std::chrono::steady_clock::now() < hold_end) {
        co_await sleep_for(plan.step);
        if (!lead->owns()) {
            lost = true;
            break;
        }
        // The leader's work: a write with its term to the fenced resource.
        if (store.write(lead->term(), id))
            ++t.writes;
        else
            ++t.refused;
        if (proclaim && index == 0) {
            journal.proclaiming(id, ++index);
            try {
                co_await lead->co_proclaim(campaign_value(id, index));
                journal.proclaimed(id, index);
                ++t.proclaims;
            } catch (boost::system::system_error const&) {
                ++t.proclaim_errors; // it may have been published all the same
            }
        }
    }
    // A tenure over before co_campaign returned had no time to act in: no interval, and its
    // term says nothing of the order of grants (it may have returned after the next leader's).
    auto const h = tenure(lead->guard(), id, acquired_ns);
    if (h.could_act())
        history.record(h);
    auto const how = lost ? "lost" : pick(1, 100) <= plan.resign_percent ? "resign" : "drop";
    journal.ended(id, how);
    if (lost) {
        ++t.losses;
    } else if (how == std::string_view("resign")) {
        try {
            co_await lead->release();
            ++t.resigns;
        } catch (boost::system::system_error const&) {
            ++t.resign_errors; // the lease runs out by its ttl
        }
    } else {
        ++t.drops; // resigned in the background
    }
    lead.reset();
    co_await sleep_for(milliseconds(pick(0, plan.pause_max.count())));
}

} // namespace

// ------------------------------------------------------------------------------- lead

int run_lead(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    election el{client.locks(), args.text("name")};
    auto const opt = worker_lock_options(args);
    auto const step = milliseconds(args.number_or("step-ms", 20));
    auto const holder = fmt::format("p{}", args.text("proc"));
    colock::test::history_writer history(args.text("history"));
    colock::test::fenced_store store(args.text("store"));
    asio::posix::stream_descriptor in(ctx, dup(STDIN_FILENO));

    return run_commanded(ctx, client, in, [&]() -> asio::awaitable<void> {
        auto lead = co_await el.co_campaign(args.text_or("value", holder), opt);
        auto const acquired_ns = steady_now_ns();
        say(fmt::format("leading {} {}", acquired_ns, lead.term()));
        std::int64_t lost_ns = 0;
        lead.guard().async_wait_lost([&](error_code ec) {
            if (!ec && lead.guard().lost()) {
                lost_ns = steady_now_ns();
                say(fmt::format("lost {}", lost_ns));
            }
        });
        bool resign = false;
        auto const state = [&] {
            return fmt::format("state leads={} lost={}", lead.owns() ? 1 : 0,
                               lead.guard().lost() ? 1 : 0);
        };
        co_await (
            lead_steps(lead, step) ||
            read_commands(in, holder_commands(
                                  store, [&] { return lead.term(); }, state, "resign", resign)));
        history.record(tenure(lead.guard(), holder, acquired_ns, lost_ns));
        co_await end_as_asked(
            resign, [&] { return lead.release(); }, "resign", "resigned");
        client.close();
    });
}

// ------------------------------------------------------------------------------- campaign

int run_campaign(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    election el{client.locks(), args.text("name")};
    auto const opt = worker_lock_options(args);
    campaign_plan plan;
    plan.proc = args.text("proc");
    plan.first = args.number_or("first", 0);
    plan.campaigns = args.number("campaigns");
    plan.until = std::chrono::steady_clock::now() + milliseconds(args.number_or("ms", 600'000));
    plan.hold_min = milliseconds(args.number_or("hold-min-ms", 20));
    plan.hold_max = milliseconds(args.number_or("hold-max-ms", 200));
    plan.step = milliseconds(args.number_or("step-ms", 20));
    plan.pause_max = milliseconds(args.number_or("pause-max-ms", 50));
    plan.resign_percent = static_cast<int>(args.number_or("resign-percent", 70));
    plan.proclaim_percent = static_cast<int>(args.number_or("proclaim-percent", 30));
    colock::test::history_writer history(args.text("history"));
    colock::test::fenced_store store(args.text("store"));
    election_journal_writer journal(args.text("journal"));
    std::minstd_rand rng(static_cast<unsigned>(std::hash<std::string>{}(plan.proc)));
    campaign_tally t;
    int rc = 0;

    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            for (auto k = plan.first;
                 k < plan.campaigns && std::chrono::steady_clock::now() < plan.until; ++k)
                co_await one_campaign(el, opt, fmt::format("{}k{}", plan.proc, k), plan, rng,
                                      journal, history, store, t);
            co_await sleep_for(300ms); // background resigns of dropped leaderships
            client.close();
        },
        report_failure(rc, [&] { client.close(); }));
    ctx.run();
    say(fmt::format("summary campaigns={} leads={} over_at_return={} errors={} timeouts={} "
                    "losses={} resigns={} resign_errors={} drops={} proclaims={} "
                    "proclaim_errors={} writes={} refused={} reconnects={}",
                    t.campaigns, t.leads, t.over_at_return, t.errors, t.timeouts, t.losses,
                    t.resigns, t.resign_errors, t.drops, t.proclaims, t.proclaim_errors, t.writes,
                    t.refused, client.reconnect_count()));
    return rc;
}

// ------------------------------------------------------------------------------- observe

int run_observe(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    election el{client.locks(), args.text("name")};
    asio::posix::stream_descriptor in(ctx, dup(STDIN_FILENO));

    return run_commanded(ctx, client, in, [&]() -> asio::awaitable<void> {
        auto watch = el.observe();
        auto changes = [&]() -> asio::awaitable<void> {
            while (auto c = co_await watch.co_next())
                say(fmt::format("change {} {} {} {} {}", steady_now_ns(), c->leading ? 1 : 0,
                                c->term, c->resynced ? 1 : 0, c->value.empty() ? "-" : c->value));
            say("watch over");
            co_await read_commands(in, [](auto const&) { return false; });
        };
        // Until "exit" (or the end of stdin).
        co_await (changes() || read_commands(in, [](auto const&) { return false; }));
        watch.close();
        client.close();
    });
}

} // namespace colock::reliability
