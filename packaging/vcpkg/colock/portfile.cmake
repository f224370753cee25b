# An overlay port that builds the checkout it lives in:
#   vcpkg install colock --overlay-ports=<colock>/packaging/vcpkg
# The configure options are those of docs/install.md's install step, without the tool: the
# library alone (ctest package_recipes checks them). The library is static or shared as the
# triplet says.
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../../..")

vcpkg_cmake_configure(
    SOURCE_PATH "${SOURCE_PATH}"
    OPTIONS
        -DCOLOCK_BUILD_TESTS=OFF
        -DCOLOCK_BUILD_EXAMPLES=OFF
        -DCOLOCK_BUILD_BENCH=OFF
        -DCOLOCK_BUILD_TOOLS=OFF
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH lib/cmake/colock)
vcpkg_fixup_pkgconfig()

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug/include" "${CURRENT_PACKAGES_DIR}/debug/share")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
