// A locker's identity and the parts its synchronizers share.
#include "lock/core/locker_context.hpp"

#include "lock/base/token.hpp"

namespace colock::detail {

locker_context::locker_context(std::shared_ptr<lease_store> store, std::string prefix)
    : store_(std::move(store))
    , strand_(store_->strand())
    , prefix_(std::move(prefix))
    , owner_(random_token().substr(0, 16))
    , locker_key_prefix_(prefix_ + "locker:")
    , book_(std::make_shared<lease_book>(strand_, [store = store_](std::chrono::milliseconds ttl) {
        return store->safe_ttl(ttl);
    })) {}

} // namespace colock::detail
