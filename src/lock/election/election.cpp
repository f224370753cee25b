// Leader election: the campaign (the lock's queue and grant on the election's keys, then the
// claim of the term), the leadership's proclaim and resign, and who leads now. The watch is in
// leader_watch.cpp, what it reports in leader_tracker.cpp.
#include "lock/election/election_core.hpp"

#include "detail/async_form.hpp"
#include "detail/completion.hpp"
#include "detail/spawn.hpp"
#include "lock/base/errors.hpp"
#include "lock/core/holder_record.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/store/election_scripts.hpp"
#include "lock/store/lock_replies.hpp"

#include <colock/error.hpp>
#include <colock/redis/error.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <limits>

namespace colock {

namespace asio = boost::asio;
using boost::asio::any_completion_handler;
using boost::system::error_code;
using boost::system::system_error;
using std::chrono::milliseconds;

// ---------------------------------------------------------------------- leadership

leadership::leadership() noexcept = default;
leadership::leadership(leadership&& other) noexcept = default;
leadership& leadership::operator=(leadership&& other) noexcept = default;
leadership::~leadership() = default;

leadership::leadership(lock_guard guard, std::string name, std::string value,
                       std::shared_ptr<detail::election_core> core) noexcept
    : guard_(std::move(guard))
    , name_(std::move(name))
    , value_(std::move(value))
    , version_(1)
    , core_(std::move(core)) {}

std::string const& leadership::name() const noexcept {
    return name_;
}

std::int64_t leadership::term() const noexcept {
    return guard_.fence();
}

std::string const& leadership::value() const noexcept {
    return value_;
}

asio::awaitable<void> leadership::wait_lost() {
    return guard_.wait_lost();
}

asio::awaitable<void> leadership::co_proclaim(std::string value) {
    if (!core_)
        throw system_error(error::not_held, "colock: proclaim of a leadership that leads nothing");
    auto core = core_;
    // A version of its own even when this call fails: it may have been applied.
    auto const version = ++version_;
    auto const done = co_await detail::on_strand<bool>(
        core->locker().strand(), core->proclaim(guard_, value, version, false));
    if (!done)
        throw system_error(error::lock_lost,
                           fmt::format("colock: proclaim of election '{}': term {} is over; the "
                                       "value was not published",
                                       name_, guard_.fence()));
    value_ = std::move(value);
}

void leadership::start_proclaim(std::string value,
                                any_completion_handler<void(error_code)> handler) {
    if (!core_) {
        detail::complete_without_io(std::move(handler), error_code(error::not_held));
        return;
    }
    auto core = core_;
    auto const version = ++version_; // as co_proclaim: the version is used even on a failure
    auto op = [](std::shared_ptr<detail::election_core> c, lock_guard const* guard, std::string v,
                 std::int64_t n) -> asio::awaitable<bool> {
        co_return co_await c->proclaim(*guard, v, n, false);
    }(core, &guard_, value, version);
    detail::spawn_cancellable(
        core->locker().strand(), std::move(op), std::move(handler),
        [this, value = std::move(value)](auto h, std::exception_ptr e, bool done) mutable {
            auto ec = detail::code_of(e);
            if (!ec && !done)
                ec = error::lock_lost;
            if (!ec)
                value_ = std::move(value); // on the handler's executor, before it runs
            std::move(h)(ec);
        });
}

asio::awaitable<bool> leadership::release() {
    // The release ends the term's record with the lease, and tells the watches.
    return guard_.release();
}

// ---------------------------------------------------------------------- election

election::election(locker& l, std::string_view name) {
    validate(name, lock_options{});
    core_ = std::make_shared<detail::election_core>(detail::context_of(l), std::string(name));
}

election::executor_type election::get_executor() const noexcept {
    return core_ ? core_->locker().strand().get_inner_executor() : executor_type{};
}

election::~election() = default;

std::string const& election::name() const noexcept {
    return core_->name();
}

asio::awaitable<leadership> election::co_campaign(std::string value, lock_options opt) {
    return campaign(core_, std::move(value), std::move(opt));
}

void election::start_campaign(std::shared_ptr<detail::election_core> core, std::string value,
                              lock_options opt,
                              any_completion_handler<void(error_code, leadership)> handler) {
    auto strand = core->locker().strand();
    detail::spawn_to_code(strand, campaign(std::move(core), std::move(value), std::move(opt)),
                          std::move(handler), [](leadership l) { return l; });
}

void election::start_leader(
    std::shared_ptr<detail::election_core> core,
    any_completion_handler<void(error_code, std::optional<leader_info>)> handler) {
    auto strand = core->locker().strand();
    // The core kept alive by the operation: the election may go away meanwhile.
    auto op = [](std::shared_ptr<detail::election_core> c)
        -> asio::awaitable<std::optional<leader_info>> { co_return co_await c->leader(); }(core);
    detail::spawn_to_code(strand, std::move(op), std::move(handler),
                          [](std::optional<leader_info> l) { return l; });
}

asio::awaitable<leadership> election::campaign(std::shared_ptr<detail::election_core> core,
                                               std::string value, lock_options opt) {
    // Each term is granted by the server: never handed within this process without it.
    opt.cohort_limit = 0;
    opt.retain = std::chrono::milliseconds{0}; // nor kept for the next campaign
    // wait_timeout bounds the whole campaign, its rounds together.
    detail::wait_budget const budget(opt.wait_timeout, detail::clock_type::now());
    for (;;) {
        auto this_round = opt;
        this_round.wait_timeout = budget.left(detail::clock_type::now());
        lock_guard guard =
            co_await core->locker().co_lock_in(core->space(), core->name(), this_round);
        auto const claimed = co_await detail::on_strand<bool>(
            core->locker().strand(), core->proclaim(guard, value, 1, true));
        auto const cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() != asio::cancellation_type::none)
            // The guard goes, and its release ends the term just claimed.
            throw system_error(
                asio::error::operation_aborted,
                fmt::format("colock: campaign of election '{}' cancelled", core->name()));
        if (claimed)
            co_return leadership(std::move(guard), core->name(), std::move(value), core);
        // The lease was lost between its grant and the claim: campaign again.
    }
}

void election::start_force_resign(std::shared_ptr<detail::election_core> core,
                                  any_completion_handler<void(error_code, bool)> handler) {
    auto strand = core->locker().strand();
    auto op = [](std::shared_ptr<detail::election_core> c) -> asio::awaitable<bool> {
        co_return co_await c->force_resign();
    }(core);
    detail::spawn_to_code(strand, std::move(op), std::move(handler),
                          [](bool ended) { return ended; });
}

asio::awaitable<bool> election::co_force_resign() {
    auto core = core_;
    co_return co_await detail::on_strand<bool>(core->locker().strand(), core->force_resign());
}

asio::awaitable<std::optional<leader_info>> election::co_leader() {
    auto core = core_;
    co_return co_await detail::on_strand<std::optional<leader_info>>(core->locker().strand(),
                                                                     core->leader());
}

} // namespace colock
