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
    explicit request_op(exec_handler h)
        : handler(std::move(h)), caller_slot(asio::get_associated_cancellation_slot(handler)) {}

    std::uint64_t id = 0;
    std::optional<std::uint16_t> slot;
    bool transaction = false; // holds MULTI: never split, never sent again
    exec_handler handler;
    asio::cancellation_slot caller_slot;
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

// Keyless commands that belong to the node of the keyed commands around them: SCRIPT LOAD (the
// script must be there) and WAIT (it counts the replicas of this connection's writes there).
bool rides_along(std::vector<std::string_view> const& command) {
    auto upper = [](std::string_view w) {
        std::string u(w);
        for (auto& c : u)
            c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        return u;
    };
    auto const name = upper(command[0]);
    return (command.size() == 3 && name == "SCRIPT" && upper(command[1]) == "LOAD") ||
           (command.size() == 3 && name == "WAIT");
}

} // namespace

void cluster_engine::start_exec(resp3::request req, exec_handler handler) {
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
    auto op = std::make_shared<request_op>(std::move(handler));
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
    colock::detail::complete_now(strand_, std::move(op.handler), op.caller_slot, ec,
                                 std::move(resp));
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

asio::awaitable<void> cluster_engine::run_request(std::shared_ptr<cluster_engine> self,
                                                  std::shared_ptr<request_op> op_ptr) {
    co_await asio::this_coro::throw_if_cancelled(false);
    auto& op = *op_ptr;
    auto const n = op.commands.size();
    response out(n);
    std::vector<std::size_t> pending(n);
    for (std::size_t i = 0; i < n; ++i)
        pending[i] = i;
    std::vector<std::optional<server_address>> asking(n);
    auto const deadline = std::chrono::steady_clock::now() + redirect_budget(self->cfg_);
    std::chrono::milliseconds pause{10};
    bool answered = false; // some command has run: total cancellation no longer applies
    error_code retry_ec;   // why the commands still pending were last not sent

    for (int round = 0;; ++round) {
        auto const stop_types =
            answered ? asio::cancellation_type::terminal | asio::cancellation_type::partial
                     : ~asio::cancellation_type::none;
        if ((op.cancelled & stop_types) != asio::cancellation_type::none) {
            self->finish_request(op, asio::error::operation_aborted, std::move(out));
            co_return;
        }
        if (self->final_ || self->closes_ != op.closes) {
            self->finish_request(op, error::closed, std::move(out));
            co_return;
        }
        if (!self->map_known_) {
            co_await self->await_map(true, op.attempt.slot());
            if (op.cancelled != asio::cancellation_type::none || self->closes_ != op.closes)
                continue; // said at the top
            if (!self->map_known_) {
                error_code ec;
                {
                    std::lock_guard lock(self->error_mutex_);
                    ec = self->last_connect_ec_;
                }
                self->finish_request(op, ec ? ec : error_code(error::no_slot_map), std::move(out));
                co_return;
            }
            continue;
        }
        bool again = false;    // something stays pending: another round
        bool wait = false;     // ...after a pause
        bool unserved = false; // no node serves the slot
        error_code failure;    // ends the request
        std::vector<std::size_t> still;
        // One attempt per destination: the ASK targets, then the slot's primary.
        std::vector<std::pair<node_ptr, std::vector<std::size_t>>> groups;
        for (auto i : pending) {
            auto node = asking[i] ? self->node_for(*asking[i]) : self->route(op.slot);
            if (!node) {
                unserved = true;
                still.push_back(i);
                continue;
            }
            auto it = std::find_if(groups.begin(), groups.end(),
                                   [&](auto const& g) { return g.first == node; });
            if (it == groups.end())
                groups.emplace_back(node, std::vector<std::size_t>{i});
            else
                it->second.push_back(i);
        }
        for (auto& [node, members] : groups) {
            if (failure)
                break;
            resp3::request req;
            bool const asked = asking[members.front()].has_value();
            for (auto i : members) {
                if (asking[i])
                    req.push("ASKING");
                auto const& c = op.commands[i];
                req.push_range(c[0], std::span(c).subspan(1));
            }
            op.at = asked ? nullptr : node;
            op.rerouted = false;
            auto [ec, resp] = co_await exec_on(
                *node->conn, std::move(req),
                asio::bind_cancellation_slot(op.attempt.slot(), nothrow_awaitable));
            op.at = nullptr;
            if (ec == asio::error::operation_aborted && op.rerouted &&
                op.cancelled == asio::cancellation_type::none) {
                still.insert(still.end(), members.begin(), members.end());
                again = true;
                continue;
            }
            if (ec && ec != error::server_error) {
                if (is_connect_failure(ec) && std::chrono::steady_clock::now() < deadline &&
                    op.cancelled == asio::cancellation_type::none) {
                    // The node may be gone for good (failed over): ask the others, then again.
                    retry_ec = error_code(ec.value(), ec.category());
                    self->refresh();
                    still.insert(still.end(), members.begin(), members.end());
                    again = wait = true;
                    continue;
                }
                failure = ec;
                break;
            }
            std::size_t k = 0;
            for (auto i : members) {
                if (asking[i])
                    ++k; // ASKING's +OK
                auto& v = resp.at(k++);
                auto const rd = v.is_error() && !op.transaction
                                    ? read_redirect(v.text, node->address)
                                    : cluster_redirect{};
                answered = true; // a command ran, or was refused: either way, it was read
                switch (rd.what) {
                case cluster_redirect::kind::none:
                    out[i] = std::move(v);
                    continue;
                case cluster_redirect::kind::moved:
                    self->table_.move(rd.slot, rd.to);
                    self->refresh();
                    asking[i].reset();
                    break;
                case cluster_redirect::kind::ask:
                    asking[i] = rd.to;
                    break;
                case cluster_redirect::kind::try_again:
                case cluster_redirect::kind::cluster_down:
                    if (rd.what == cluster_redirect::kind::cluster_down)
                        self->refresh();
                    asking[i].reset();
                    wait = true;
                    break;
                }
                out[i] = std::move(v); // the last word, should the budget run out
                still.push_back(i);
                again = true;
            }
        }
        if (failure) {
            self->finish_request(op, failure, std::move(out));
            co_return;
        }
        // A SCRIPT LOAD or a WAIT of a request whose keyed command goes elsewhere goes with it:
        // the script is needed there, and WAIT must count the replicas of that node. Loading a
        // script twice does no harm; WAIT's first answer is replaced by the one that counts.
        for (std::size_t k = 0, end = still.size(); k < end; ++k)
            for (std::size_t j = 0; j < n; ++j)
                if (j != still[k] && rides_along(op.commands[j]) &&
                    std::find(still.begin(), still.end(), j) == still.end()) {
                    asking[j] = asking[still[k]];
                    still.push_back(j);
                }
        if (unserved) {
            self->refresh();
            again = wait = true;
            for (auto i : still)
                if (out[i].type != resp3::type::simple_error) {
                    out[i].type = resp3::type::simple_error;
                    out[i].text = fmt::format("CLUSTERDOWN colock: no node serves slot {}",
                                              op.slot.value_or(0));
                }
        }
        std::sort(still.begin(), still.end());
        pending = std::move(still);
        if (!again || pending.empty())
            break;
        auto const now = std::chrono::steady_clock::now();
        if (round + 1 >= max_rounds || now >= deadline)
            break; // the last answers stand
        if (wait) {
            asio::steady_timer timer(self->strand_);
            timer.expires_after(
                std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
            co_await timer.async_wait(
                asio::bind_cancellation_slot(op.attempt.slot(), nothrow_awaitable));
            pause = std::min(pause * 2, std::chrono::milliseconds(200));
        }
    }
    // A command that never got an answer (its node unreachable for the whole budget) makes the
    // request fail with that reason, not succeed with a null.
    bool const unanswered = std::any_of(pending.begin(), pending.end(),
                                        [&](std::size_t i) { return !out[i].is_error(); });
    if (unanswered) {
        self->finish_request(op, retry_ec ? retry_ec : error_code(error::connection_lost),
                             std::move(out));
        co_return;
    }
    bool const refused =
        std::any_of(out.begin(), out.end(), [](auto const& v) { return v.is_error(); });
    self->finish_request(op, refused ? error_code(error::server_error) : error_code{},
                         std::move(out));
}

} // namespace colock::redis::detail
