// What a semaphore (or a read-write lock: a semaphore whose writer takes every permit), its
// holdings and its waiting calls share: the locker (whose store serves the requests), the keys,
// and the waiting calls with their wake channel. Private to the library's
// sources; on the locker's strand, but for what says otherwise.
#pragma once

#include "detail/failure_report.hpp"
#include "detail/spawn.hpp"
#include "lock/base/common.hpp"
#include "lock/core/acquisition.hpp"
#include "lock/core/lease.hpp"
#include "lock/core/wake_channel.hpp"
#include "lock/semaphore/semaphore_policy.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/error.hpp>
#include <colock/lock_options.hpp>
#include <colock/semaphore_status.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>

namespace colock::detail {

class locker_context;
class permit_state;

// How an acquire ended.
struct permit_outcome {
    boost::system::error_code ec;
    std::string message; // names the semaphore
    std::shared_ptr<permit_state> state;
};

class semaphore_core final : public std::enable_shared_from_this<semaphore_core> {
public:
    // `kind` names it in messages ("semaphore", "read-write lock"); its keys are under the
    // locker's prefix + `kind_prefix`. Throws system_error(invalid_argument) with the store's
    // refusal for a locker whose store serves no permits (a quorum: Redlock).
    semaphore_core(std::shared_ptr<locker_context> locker, std::string_view kind,
                   std::string_view kind_prefix, std::string name, std::size_t capacity);
    ~semaphore_core();

    locker_context& locker() const noexcept { return *locker_; }
    // The locker's strand, where all of this runs.
    boost::asio::strand<boost::asio::any_io_executor> const& locker_strand() const noexcept;
    lease_store& store() const noexcept;
    std::string const& name() const noexcept { return name_; }
    std::string const& kind() const noexcept { return kind_; }
    std::size_t capacity() const noexcept { return capacity_; }
    semaphore_keys const& keys() const noexcept { return keys_; }

    // Takes `permits`, waiting for them when `wait` (else one attempt: an empty state when they
    // are not free), with a new fence (`new_fence`) or the last one given (a reader). The
    // caller's cancellation (terminal, partial) ends a wait at once; a grant that arrives for a
    // cancelled call is given back before it completes.
    static boost::asio::awaitable<permit_outcome> acquire(std::shared_ptr<semaphore_core> self,
                                                          std::size_t permits, bool new_fence,
                                                          lock_options opt, bool wait);
    // The live permits and the capacity stored; throws system_error naming the semaphore.
    boost::asio::awaitable<semaphore_reading> read();

    // The holding's requests. extend: once, cancelled as the connection's requests are.
    boost::asio::awaitable<lease_reply> extend(std::string const& token,
                                               std::chrono::milliseconds ttl);
    // Makes the holding of `token` weigh one permit (a writer becomes a reader), waking the
    // calls that fit then; sent again over passing errors until release_timeout.
    boost::asio::awaitable<lease_reply> downgrade(std::string const& token);
    // An extend that also says whether the holding weighs more than one permit.
    boost::asio::awaitable<permit_extension> extend_weighing(std::string const& token,
                                                             std::chrono::milliseconds ttl);
    // Gives the permits of `token` back (or takes its entry out of the queue: `leave`), sent
    // again over passing errors until release_timeout.
    boost::asio::awaitable<lease_reply> release(std::string const& token, std::size_t permits,
                                                bool leave);
    // The same, handed to the connection now on the caller's thread (so that a close() right
    // after still sends it); a passing failure goes on with release() on the strand. Any thread.
    void release_detached(std::string token, std::size_t permits, bool leave);

    // The semaphore object is gone: its waiting calls end with operation_aborted. Any thread.
    void close();

    // What a failed request's error says (ec and the server's text), naming what ran out.
    std::string failure_text(boost::system::error_code ec, std::string const& server_text,
                             lock_options const& opt, bool waited) const;

private:
    boost::asio::awaitable<permit_grant> attempt(permit_request const& request,
                                                 boost::asio::cancellation_state cs,
                                                 clock_type::time_point deadline);
    // Records how `done`, a failing finish of `acq`, ends an acquire: its error and text.
    void settle(permit_outcome& out, acquisition const& acq, acquisition_action const& done) const;

    std::shared_ptr<locker_context> const locker_;
    std::string const kind_;
    std::string const name_;
    std::size_t const capacity_;
    semaphore_keys const keys_;
    // The waiting calls, woken by messages on this locker's wake channel for the semaphore.
    std::shared_ptr<wake_channel> const wakes_;
};

// The status of `core`'s semaphore: its keys and the records of the holders listed. Throws
// system_error naming it. On the strand.
boost::asio::awaitable<semaphore_status> read_status(std::shared_ptr<semaphore_core> core);

// A permit's state: the lease core with the holding's identity. Shared by the permit, its
// renewal and its background release.
class permit_state final : public lease {
public:
    permit_state(std::shared_ptr<semaphore_core> core, std::string token, std::size_t permits,
                 std::int64_t fence, lock_options const& opt, clock_type::time_point acquired_at,
                 clock_type::time_point deadline, std::uint64_t server_generation);

    semaphore_core& core() const noexcept { return *core_; }
    std::string const& token() const noexcept { return token_; }
    // The permits it holds: a downgraded writer holds one.
    std::size_t permits() const noexcept { return permits_.load(); }
    void set_permits(std::size_t n) noexcept { permits_.store(n); }
    std::int64_t fence() const noexcept { return fence_; }
    // A writer's downgrade was sent and its outcome is not known (or not yet): the holding may
    // be a reader's, so its write guard does not claim the write lock, until a reply or a
    // renewal (which then asks for the weight) says which.
    bool exclusive_in_doubt() const noexcept { return exclusive_in_doubt_.load(); }
    void set_exclusive_in_doubt(bool doubt) noexcept { exclusive_in_doubt_.store(doubt); }

    // Joins the locker's book and starts renewing; once, when made.
    void hold();
    // What the observer calls it ("semaphore", "read-write lock"), and its release told there
    // (on the strand; not for a lost holding).
    std::string_view kind() const noexcept;
    void note_released() const;

    std::shared_ptr<permit_state> shared() {
        return std::static_pointer_cast<permit_state>(shared_from_this());
    }

private:
    boost::asio::awaitable<lease_reply> extend_at_server(std::chrono::milliseconds ttl,
                                                         bool renewal) override;
    std::uint64_t current_server_generation() const noexcept override;
    bool is_lease(std::string_view key, std::string_view token) const noexcept override;
    void give_back_now() noexcept override;
    void on_lost(loss_reason why) override;
    void on_renewal(clock_type::duration latency, bool extended,
                    boost::system::error_code ec) override;
    void on_confirmed(std::chrono::milliseconds) override {}

    std::shared_ptr<semaphore_core> const core_;
    std::string const token_;
    std::atomic<std::size_t> permits_;
    std::int64_t const fence_;
    std::atomic<bool> exclusive_in_doubt_{false};
};

// An acquire for an awaiting caller (the co_* forms), whose cancellation reaches it on the
// strand: the outcome of a success, else throws system_error with its code and message.
boost::asio::awaitable<permit_outcome> await_acquire(std::shared_ptr<semaphore_core> core,
                                                     std::size_t permits, bool new_fence,
                                                     lock_options opt, bool wait);

// An acquire for a completion handler (the async_* forms): `finish(handler, code, outcome)` on
// the handler's executor once it ends (a coroutine that threw: error::unexpected_reply).
template <class Handler, class Finish>
void spawn_acquire(std::shared_ptr<semaphore_core> core, std::size_t permits, bool new_fence,
                   lock_options opt, bool wait, Handler handler, Finish finish) {
    auto strand = core->locker_strand();
    spawn_cancellable(
        strand, semaphore_core::acquire(std::move(core), permits, new_fence, std::move(opt), wait),
        std::move(handler), [finish](Handler h, std::exception_ptr e, permit_outcome o) {
            auto ec = o.ec;
            if (e)
                ec = make_error_code(error::unexpected_reply);
            // with_diagnostics is told what the awaitable form throws.
            finish_reporting(finish, std::move(h), ec, e, std::move(o));
        });
}

} // namespace colock::detail
