// The read-write lock: a semaphore of 2^40 permits whose reader takes one and whose writer takes
// them all (semaphore_scripts.hpp says how the queue then serves them in batches), and the
// downgrade, which makes the writer's holding weigh one permit.
#include "lock/semaphore/semaphore_core.hpp"

#include "detail/async_form.hpp"
#include "detail/completion.hpp"
#include "lock/core/locker_context.hpp"

#include <colock/rw_lock.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock {

namespace asio = boost::asio;
using boost::system::error_code;
using boost::system::system_error;

namespace {

// Every permit: a writer's weight, which no reader fits beside.
constexpr std::size_t all_permits = std::size_t{1} << 40;

// A read-write lock's status, from its semaphore's: the writer's holding weighs every permit.
asio::awaitable<rw_lock_status> read_rw_status(std::shared_ptr<detail::semaphore_core> core) {
    auto sem = co_await detail::read_status(std::move(core));
    rw_lock_status st;
    st.name = std::move(sem.name);
    st.fence = sem.fence;
    st.queued = sem.queued;
    st.holdings = std::move(sem.holdings);
    bool const writer = std::any_of(st.holdings.begin(), st.holdings.end(),
                                    [](holding_status const& h) { return h.permits > 1; });
    if (writer) {
        st.state = rw_state::exclusive;
    } else if (sem.used > 0) {
        st.state = rw_state::shared;
        st.readers = sem.used;
    }
    co_return st;
}

} // namespace

void rw_lock::start_status(std::shared_ptr<detail::semaphore_core> core,
                           asio::any_completion_handler<void(error_code, rw_lock_status)> handler) {
    auto strand = core->locker().strand();
    detail::spawn_to_code(strand, read_rw_status(std::move(core)), std::move(handler),
                          [](rw_lock_status s) { return s; });
}

asio::awaitable<rw_lock_status> rw_lock::co_status() {
    check(lock_options{});
    auto core = core_;
    co_return co_await detail::on_strand<rw_lock_status>(core->locker().strand(),
                                                         read_rw_status(core));
}

// ---------------------------------------------------------------------- guards

bool write_guard::owns() const noexcept {
    return lease_guard::owns() && !state_->exclusive_in_doubt();
}

namespace {

// The downgrade of the writer's lease `st`, throwing as write_guard::co_downgrade says; the
// state, now a reader's, when it went through.
asio::awaitable<std::shared_ptr<detail::permit_state>>
downgrade(std::shared_ptr<detail::permit_state> st) {
    auto const name = st->core().name();
    if (st->lost())
        throw system_error(error::lock_lost,
                           fmt::format("colock: co_downgrade of read-write lock '{}': the write "
                                       "lease was lost",
                                       name));
    // Until the reply says, the holding may already be a reader's: the guard claims no more
    // (owns() false). On the locker's strand, not reachable by the caller's cancellation:
    // its outcome must be known.
    st->set_exclusive_in_doubt(true);
    auto [e, reply] = co_await asio::co_spawn(
        st->strand(),
        [](std::shared_ptr<detail::permit_state> s) -> asio::awaitable<detail::lease_reply> {
            co_return co_await s->core().downgrade(s->token());
        }(st),
        asio::bind_cancellation_slot(asio::cancellation_slot(),
                                     asio::as_tuple(asio::use_awaitable)));
    if (e)
        std::rethrow_exception(e);
    if (reply.ec)
        throw system_error(error_code(reply.ec.value(), reply.ec.category()),
                           fmt::format("colock: co_downgrade of read-write lock '{}': its outcome "
                                       "is not known, so the guard no longer claims the write "
                                       "lock (owns() is false) until the next renewal says "
                                       "which it holds; co_downgrade() again to be sure",
                                       name));
    if (!reply.ours) {
        st->mark_lost(loss_reason::not_ours);
        throw system_error(error::lock_lost,
                           fmt::format("colock: co_downgrade of read-write lock '{}': the write "
                                       "lease was lost",
                                       name));
    }
    st->set_permits(1);
    st->set_exclusive_in_doubt(false);
    co_return st;
}

} // namespace

asio::awaitable<read_guard> write_guard::co_downgrade() {
    if (!state_ || state_->released())
        throw system_error(error::not_held,
                           "colock: co_downgrade of a write guard that holds nothing");
    auto st = co_await downgrade(state_);
    state_.reset();
    co_return read_guard(std::move(st));
}

void write_guard::start_downgrade(
    asio::any_completion_handler<void(error_code, read_guard)> handler) {
    // Not cancelled by the caller: the handler's slot is not connected to the operation.
    auto uncancelled = asio::bind_cancellation_slot(asio::cancellation_slot(), std::move(handler));
    if (!state_ || state_->released()) {
        detail::post_completion(asio::system_executor(), std::move(uncancelled),
                                asio::cancellation_slot(), error_code(error::not_held),
                                read_guard());
        return;
    }
    auto strand = state_->core().locker_strand();
    detail::spawn_cancellable(
        strand, downgrade(state_), std::move(uncancelled),
        [this](auto h, std::exception_ptr e, std::shared_ptr<detail::permit_state> st) {
            auto const ec = detail::code_of(e);
            if (ec) {
                std::move(h)(ec, read_guard());
                return;
            }
            state_.reset(); // on the handler's executor, before it runs
            std::move(h)(ec, read_guard(std::move(st)));
        });
}

// ---------------------------------------------------------------------- rw_lock

rw_lock::rw_lock(locker& l, std::string_view name) {
    validate(name, lock_options{});
    core_ = std::make_shared<detail::semaphore_core>(detail::context_of(l), "read-write lock",
                                                     "rw:", std::string(name), all_permits);
}

rw_lock::rw_lock(rw_lock&& other) noexcept = default;

rw_lock::executor_type rw_lock::get_executor() const noexcept {
    return core_ ? core_->locker().strand().get_inner_executor() : executor_type{};
}

rw_lock& rw_lock::operator=(rw_lock&& other) noexcept {
    if (this != &other) {
        if (core_)
            core_->close();
        core_ = std::move(other.core_);
    }
    return *this;
}

rw_lock::~rw_lock() {
    if (core_)
        core_->close();
}

std::string const& rw_lock::name() const noexcept {
    static std::string const none;
    return core_ ? core_->name() : none;
}

void rw_lock::check(lock_options const& opt) const {
    if (!core_)
        throw system_error(error::invalid_argument, "colock: a moved-from read-write lock");
    validate(core_->name(), opt);
}

void rw_lock::start_lock_shared(std::shared_ptr<detail::semaphore_core> core, lock_options opt,
                                read_handler handler) {
    detail::spawn_acquire(std::move(core), 1, false, std::move(opt), true, std::move(handler),
                          [](read_handler h, error_code ec, detail::permit_outcome o) {
                              std::move(h)(ec, read_guard(std::move(o.state)));
                          });
}

void rw_lock::start_lock(std::shared_ptr<detail::semaphore_core> core, lock_options opt,
                         write_handler handler) {
    detail::spawn_acquire(std::move(core), all_permits, true, std::move(opt), true,
                          std::move(handler),
                          [](write_handler h, error_code ec, detail::permit_outcome o) {
                              std::move(h)(ec, write_guard(std::move(o.state)));
                          });
}

void rw_lock::start_try_lock_shared(std::shared_ptr<detail::semaphore_core> core, lock_options opt,
                                    try_read_handler handler) {
    detail::spawn_acquire(std::move(core), 1, false, std::move(opt), false, std::move(handler),
                          [](try_read_handler h, error_code ec, detail::permit_outcome o) {
                              std::optional<read_guard> g;
                              if (o.state)
                                  g.emplace(read_guard(std::move(o.state)));
                              std::move(h)(ec, std::move(g));
                          });
}

void rw_lock::start_try_lock(std::shared_ptr<detail::semaphore_core> core, lock_options opt,
                             try_write_handler handler) {
    detail::spawn_acquire(std::move(core), all_permits, true, std::move(opt), false,
                          std::move(handler),
                          [](try_write_handler h, error_code ec, detail::permit_outcome o) {
                              std::optional<write_guard> g;
                              if (o.state)
                                  g.emplace(write_guard(std::move(o.state)));
                              std::move(h)(ec, std::move(g));
                          });
}

asio::awaitable<read_guard> rw_lock::co_lock_shared(lock_options opt) {
    check(opt);
    auto out = co_await detail::await_acquire(core_, 1, false, std::move(opt), true);
    co_return read_guard(std::move(out.state));
}

asio::awaitable<write_guard> rw_lock::co_lock(lock_options opt) {
    check(opt);
    auto out = co_await detail::await_acquire(core_, all_permits, true, std::move(opt), true);
    co_return write_guard(std::move(out.state));
}

asio::awaitable<std::optional<read_guard>> rw_lock::co_try_lock_shared(lock_options opt) {
    check(opt);
    auto out = co_await detail::await_acquire(core_, 1, false, std::move(opt), false);
    if (!out.state)
        co_return std::nullopt;
    co_return read_guard(std::move(out.state));
}

asio::awaitable<std::optional<write_guard>> rw_lock::co_try_lock(lock_options opt) {
    check(opt);
    auto out = co_await detail::await_acquire(core_, all_permits, true, std::move(opt), false);
    if (!out.state)
        co_return std::nullopt;
    co_return write_guard(std::move(out.state));
}

} // namespace colock
