// The Cluster engine's requests (its subscriptions are in cluster_subscriptions.cpp): each request
// goes to the primary of its keys' slot; a command redirected (MOVED, ASK) or refused for now
// (TRYAGAIN, CLUSTERDOWN) is sent again, alone, where the cluster says, while the others keep their
// answers.
#include "cluster_engine.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <span>

namespace colock::redis::detail {

struct cluster_engine::request_op {
    // Constructed with its handler: Boost 1.81's any_completion_handler move assignment recurses.
    request_op(exec_handler h, asio::any_io_executor const& io_executor, handler_work tracking)
        : handler(std::move(h))
        , caller_slot(asio::get_associated_cancellation_slot(handler))
        , work(tracking == handler_work::tracked
                   ? colock::detail::work_if_foreign(handler, io_executor)
                   : asio::any_completion_executor()) {}

    std::uint64_t id = 0;
    std::optional<std::uint16_t> slot;
    bool transaction = false; // holds MULTI: never split, never sent again
    exec_handler handler;
    asio::cancellation_slot caller_slot;
    // On the handler's own executor, until its completion is handed over (finish_request).
    asio::any_completion_executor work;
    std::string payload; // the request as given; `commands` are views into it
    std::vector<std::vector<std::string_view>> commands;
    // Bound to each attempt and pause: the caller's cancellation, and rerouting, go through it.
    asio::cancellation_signal attempt;
    asio::cancellation_type cancelled = asio::cancellation_type::none; // by the caller
    bool rerouted = false;
    std::uint64_t closes = 0; // the engine's close() count when it started
    node_ptr at;              // the node of the attempt under way (not an ASK's)
    bool done = false;
};

namespace {

// How long redirections and refusals for now are followed before the request fails with the
// last answer: the cluster settles a failover or a migration within this.
std::chrono::milliseconds redirect_budget(config const& cfg) {
    return std::max(cfg.connect_timeout, std::chrono::milliseconds(1000));
}
constexpr int max_rounds = 16;

bool is_multi(std::string_view name) {
    return name.size() == 5 && (name[0] | 0x20) == 'm' && (name[1] | 0x20) == 'u' &&
           (name[2] | 0x20) == 'l' && (name[3] | 0x20) == 't' && (name[4] | 0x20) == 'i';
}

// Keyless commands that belong to the node of the keyed commands around them: SCRIPT LOAD and
// FUNCTION LOAD (the script or the library must be there: a library is per node) and WAIT (it
// counts the replicas of this connection's writes there).
bool rides_along(std::vector<std::string_view> const& command) {
    auto upper = [](std::string_view w) {
        std::string u(w);
        for (auto& c : u)
            c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        return u;
    };
    auto const name = upper(command[0]);
    return (command.size() == 3 && (name == "SCRIPT" || name == "FUNCTION") &&
            upper(command[1]) == "LOAD") ||
           (command.size() == 3 && name == "WAIT");
}

// A SCRIPT LOAD, FUNCTION LOAD or WAIT of a request whose keyed command goes elsewhere goes with
// it: the script is needed there, and WAIT must count the replicas of that node. Loading a script
// twice does no harm (a library loaded twice answers that it exists); WAIT's first answer is
// replaced by the one that counts.
void add_riders(std::vector<std::vector<std::string_view>> const& commands,
                std::vector<std::optional<server_address>>& asking,
                std::vector<std::size_t>& still) {
    for (std::size_t k = 0, end = still.size(); k < end; ++k)
        for (std::size_t j = 0; j < commands.size(); ++j)
            if (j != still[k] && rides_along(commands[j]) &&
                std::find(still.begin(), still.end(), j) == still.end()) {
                asking[j] = asking[still[k]];
                still.push_back(j);
            }
}

} // namespace

void cluster_engine::start_exec(resp3::request req, exec_handler handler, handler_work work) {
    if (req.empty()) {
        colock::detail::complete_now(strand_, std::move(handler), {}, error_code{}, response{});
        return;
    }
    if (!req.unmatchable_command().empty()) {
        auto r = unmatchable_response(req);
        colock::detail::complete_now(strand_, std::move(handler), {},
                                     error_code(error::unsupported_command), std::move(r));
        return;
    }
    auto op = std::make_shared<request_op>(std::move(handler), strand_.get_inner_executor(), work);
    auto const count = req.commands();
    op->payload = req.take_payload();
    auto commands = split_commands(op->payload);
    auto route = commands ? route_request(*commands) : request_route{std::nullopt, "malformed"};
    if (!route.problem.empty()) {
        response r(count);
        r[0].type = resp3::type::simple_error;
        r[0].text = "ERR colock: " + route.problem;
        colock::detail::complete_now(strand_, std::move(op->handler), {},
                                     error_code(error::cross_slot), std::move(r));
        return;
    }
    op->commands = std::move(*commands);
    op->slot = route.slot;
    op->transaction = std::any_of(op->commands.begin(), op->commands.end(),
                                  [](auto const& c) { return is_multi(c[0]); });
    if (op->caller_slot.is_connected()) {
        op->caller_slot.assign([weak = weak_from_this(), weak_op = std::weak_ptr<request_op>(op)](
                                   asio::cancellation_type t) {
            auto self = weak.lock();
            auto o = weak_op.lock();
            if (!self || !o)
                return;
            asio::dispatch(self->strand_, [o, t] {
                if (o->done)
                    return;
                o->cancelled = o->cancelled | t;
                o->attempt.emit(t);
            });
        });
    }
    asio::dispatch(strand_, [self = shared_from_this(), op] {
        if (self->final_) {
            self->finish_request(*op, error::closed, response(op->commands.size()));
            return;
        }
        self->reopen();
        op->id = self->next_op_++;
        op->closes = self->closes_;
        self->ops_.emplace(op->id, op);
        asio::co_spawn(self->strand_, run_request(self, op), asio::detached);
    });
}

void cluster_engine::finish_request(request_op& op, error_code ec, response resp) {
    if (op.done)
        return;
    op.done = true;
    ops_.erase(op.id);
    colock::detail::post_invocation(
        strand_.get_inner_executor(), std::move(op.handler), op.caller_slot,
        [ec, resp = std::move(resp)](exec_handler h) mutable { std::move(h)(ec, std::move(resp)); },
        std::move(op.work));
}

void cluster_engine::reroute_if_moved(request_op& op) {
    if (!op.at || op.done)
        return;
    auto const now = route(op.slot);
    if (now && now != op.at) {
        op.rerouted = true;
        op.attempt.emit(asio::cancellation_type::total); // honoured while unwritten only
    }
}

// What a request's run keeps from one round to the next.
struct cluster_engine::request_run {
    request_run(std::size_t n, std::chrono::steady_clock::time_point until)
        : out(n), pending(n), asking(n), deadline(until) {
        for (std::size_t i = 0; i < n; ++i)
            pending[i] = i;
    }

    response out;                     // the answers, and for a command still pending its last word
    std::vector<std::size_t> pending; // the commands the next round sends, in order
    std::vector<std::optional<server_address>> asking; // per command: the node an ASK named
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds pause{10};
    bool answered = false; // some command has run: total cancellation no longer applies
    error_code retry_ec;   // why the commands still pending were last not sent
};

// One round of a request: its pending commands sent, each to its node, and what became of them.
struct cluster_engine::request_round {
    bool again = false;             // something stays pending: another round
    bool wait = false;              // ...after a pause
    bool unserved = false;          // no node serves the slot
    error_code failure;             // ends the request
    std::vector<std::size_t> still; // the commands the next round sends
};

asio::awaitable<void> cluster_engine::run_request(std::shared_ptr<cluster_engine> self,
                                                  std::shared_ptr<request_op> op_ptr) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto& op = *op_ptr;
    request_run run(op.commands.size(),
                    std::chrono::steady_clock::now() + redirect_budget(self->cfg_));
    for (int round_no = 0;; ++round_no) {
        auto const start = co_await self->start_round(op, run);
        if (start == round_start::ended)
            co_return;
        if (start == round_start::look_again)
            continue;
        request_round round;
        auto groups = self->group_pending(op, run, round);
        for (auto& [node, members] : groups) {
            if (round.failure)
                break;
            co_await self->send_group(op, run, round, node, members);
        }
        if (round.failure) {
            self->finish_request(op, round.failure, std::move(run.out));
            co_return;
        }
        self->end_round(op, run, round);
        bool const more = co_await self->pause_for_next_round(op, run, round, round_no);
        if (!more)
            break;
    }
    self->finish_run(op, run);
}

asio::awaitable<cluster_engine::round_start> cluster_engine::start_round(request_op& op,
                                                                         request_run& run) {
    auto const stop_types =
        run.answered ? asio::cancellation_type::terminal | asio::cancellation_type::partial
                     : ~asio::cancellation_type::none;
    if ((op.cancelled & stop_types) != asio::cancellation_type::none) {
        finish_request(op, asio::error::operation_aborted, std::move(run.out));
        co_return round_start::ended;
    }
    if (final_ || closes_ != op.closes) {
        finish_request(op, error::closed, std::move(run.out));
        co_return round_start::ended;
    }
    if (map_known_)
        co_return round_start::go;
    co_await await_map(true, op.attempt.slot());
    if (op.cancelled != asio::cancellation_type::none || closes_ != op.closes)
        co_return round_start::look_again; // said at the top
    if (!map_known_) {
        error_code ec;
        {
            std::lock_guard lock(error_mutex_);
            ec = last_connect_ec_;
        }
        finish_request(op, ec ? ec : error_code(error::no_slot_map), std::move(run.out));
        co_return round_start::ended;
    }
    co_return round_start::look_again;
}

std::vector<cluster_engine::command_group>
cluster_engine::group_pending(request_op const& op, request_run const& run, request_round& round) {
    // One attempt per destination: the ASK targets, then the slot's primary.
    std::vector<command_group> groups;
    for (auto i : run.pending) {
        auto n = run.asking[i] ? node_for(*run.asking[i]) : route(op.slot);
        if (!n) {
            round.unserved = true;
            round.still.push_back(i);
            continue;
        }
        auto it =
            std::find_if(groups.begin(), groups.end(), [&](auto const& g) { return g.first == n; });
        if (it == groups.end())
            groups.emplace_back(n, std::vector<std::size_t>{i});
        else
            it->second.push_back(i);
    }
    return groups;
}

asio::awaitable<void> cluster_engine::send_group(request_op& op, request_run& run,
                                                 request_round& round, node_ptr to,
                                                 std::vector<std::size_t> members) {
    resp3::request req;
    bool const asked = run.asking[members.front()].has_value();
    for (auto i : members) {
        if (run.asking[i])
            req.push("ASKING");
        auto const& c = op.commands[i];
        req.push_range(c[0], std::span(c).subspan(1));
    }
    op.at = asked ? nullptr : to;
    op.rerouted = false;
    auto [ec, resp] =
        co_await exec_on(*to->conn, std::move(req),
                         asio::bind_cancellation_slot(op.attempt.slot(), nothrow_awaitable));
    op.at = nullptr;
    if (ec == asio::error::operation_aborted && op.rerouted &&
        op.cancelled == asio::cancellation_type::none) {
        round.still.insert(round.still.end(), members.begin(), members.end());
        round.again = true;
        co_return;
    }
    if (ec && ec != error::server_error) {
        if (is_connect_failure(ec) && std::chrono::steady_clock::now() < run.deadline &&
            op.cancelled == asio::cancellation_type::none) {
            // The node may be gone for good (failed over): ask the others, then again.
            run.retry_ec = error_code(ec.value(), ec.category());
            refresh();
            round.still.insert(round.still.end(), members.begin(), members.end());
            round.again = round.wait = true;
            co_return;
        }
        round.failure = ec;
        co_return;
    }
    take_answers(op, run, round, *to, members, resp);
}

void cluster_engine::take_answers(request_op const& op, request_run& run, request_round& round,
                                  node const& from, std::vector<std::size_t> const& members,
                                  response& resp) {
    std::size_t k = 0;
    for (auto i : members) {
        if (run.asking[i])
            ++k; // ASKING's +OK
        auto& v = resp.at(k++);
        auto const rd = v.is_error() && !op.transaction ? read_redirect(v.text, from.address)
                                                        : cluster_redirect{};
        run.answered = true; // a command ran, or was refused: either way, it was read
        switch (rd.what) {
        case cluster_redirect::kind::none:
            run.out[i] = std::move(v);
            continue;
        case cluster_redirect::kind::moved:
            table_.move(rd.slot, rd.to);
            refresh();
            run.asking[i].reset();
            break;
        case cluster_redirect::kind::ask:
            run.asking[i] = rd.to;
            break;
        case cluster_redirect::kind::try_again:
        case cluster_redirect::kind::cluster_down:
            if (rd.what == cluster_redirect::kind::cluster_down)
                refresh();
            run.asking[i].reset();
            round.wait = true;
            break;
        }
        run.out[i] = std::move(v); // the last word, should the budget run out
        round.still.push_back(i);
        round.again = true;
    }
}

void cluster_engine::end_round(request_op const& op, request_run& run, request_round& round) {
    add_riders(op.commands, run.asking, round.still);
    if (round.unserved) {
        refresh();
        round.again = round.wait = true;
        for (auto i : round.still)
            if (run.out[i].type != resp3::type::simple_error) {
                run.out[i].type = resp3::type::simple_error;
                run.out[i].text =
                    fmt::format("CLUSTERDOWN colock: no node serves slot {}", op.slot.value_or(0));
            }
    }
    std::sort(round.still.begin(), round.still.end());
    run.pending = std::move(round.still);
}

asio::awaitable<bool> cluster_engine::pause_for_next_round(request_op& op, request_run& run,
                                                           request_round const& round,
                                                           int round_no) {
    if (!round.again || run.pending.empty())
        co_return false;
    auto const now = std::chrono::steady_clock::now();
    if (round_no + 1 >= max_rounds || now >= run.deadline)
        co_return false; // the last answers stand
    if (round.wait) {
        asio::steady_timer timer(strand_);
        timer.expires_after(
            std::min<std::chrono::steady_clock::duration>(run.pause, run.deadline - now));
        co_await timer.async_wait(
            asio::bind_cancellation_slot(op.attempt.slot(), nothrow_awaitable));
        run.pause = std::min(run.pause * 2, std::chrono::milliseconds(200));
    }
    co_return true;
}

void cluster_engine::finish_run(request_op& op, request_run& run) {
    // A command that never got an answer (its node unreachable for the whole budget) makes the
    // request fail with that reason, not succeed with a null.
    bool const unanswered = std::any_of(run.pending.begin(), run.pending.end(),
                                        [&](std::size_t i) { return !run.out[i].is_error(); });
    if (unanswered) {
        finish_request(op, run.retry_ec ? run.retry_ec : error_code(error::connection_lost),
                       std::move(run.out));
        return;
    }
    bool const refused =
        std::any_of(run.out.begin(), run.out.end(), [](auto const& v) { return v.is_error(); });
    finish_request(op, refused ? error_code(error::server_error) : error_code{},
                   std::move(run.out));
}

} // namespace colock::redis::detail
