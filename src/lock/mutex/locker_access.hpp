// A locker on any lease store: how the public constructors make theirs, and how the
// orchestration tests make one on a store without a server. Private to the library's sources.
#pragma once

#include "lock/store/lease_store.hpp"

#include <colock/locker.hpp>

#include <memory>
#include <string>

namespace colock::detail {

struct locker_access {
    // The locker's state on `store`; `client_name` goes into its holder record.
    static std::shared_ptr<locker_impl> make_impl(std::shared_ptr<lease_store> store,
                                                  std::string prefix, std::string client_name);
    // A locker that listens to `store` and ends its calls when its io_context shuts down.
    static locker make(std::shared_ptr<lease_store> store,
                       std::string prefix = "colock:", std::string client_name = {});
    // The locker's state.
    static std::shared_ptr<locker_impl> const& impl(locker const& l) noexcept { return l.impl_; }
};

} // namespace colock::detail
