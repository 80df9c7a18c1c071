# `cmake --install <build>` (docs/operations.md "Install"), included by the top CMakeLists.txt:
#   <prefix>/bin/einsummabled
#   <prefix>/bin/einsummable-health-probe           the gRPC health check (Docker's HEALTHCHECK)
#   <prefix>/lib/libeinsummable_cuda.so             the CUDA backend plugin, where CUDA is built
#   <prefix>/lib/systemd/system/einsummabled.service  ExecStart=<prefix>/bin/einsummabled
#   <prefix>/lib/sysusers.d/einsummable.conf        the service's system user
#   <prefix>/share/doc/einsummable/einsummabled.env the example configuration, for /etc/einsummable
# systemd reads units and sysusers.d files under /usr/local/lib as well as /usr/lib, so the
# default prefix /usr/local needs no further step. Checked by tests/deploy/test_install.py.

# bin/ and lib/ literally, not GNUInstallDirs' libdir (lib/x86_64-linux-gnu on Debian with prefix
# /usr): runtime/backend_choice.cc opens the plugin at <the program's directory>/../lib.
install(TARGETS einsummabled einsummable-health-probe RUNTIME DESTINATION bin)
if(TARGET einsummable_cuda_plugin)
    # The build tree's RUNPATH (the CUDA toolkit's directory) is kept: CMake would otherwise
    # strip it at install and the installed plugin would find neither the CUDA runtime it links
    # nor cuBLASLt and cuDNN, which it opens from the same places at run time, where the toolkit
    # is not on the loader's path; the daemon would then fall back to the CPU.
    set_target_properties(einsummable_cuda_plugin PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
    install(TARGETS einsummable_cuda_plugin LIBRARY DESTINATION lib)
endif()

# The unit names the daemon by its path under the default prefix; at install time (when
# `cmake --install --prefix` may have changed the prefix) it is rewritten to the prefix used.
install(CODE "set(EINSUMMABLE_UNIT \"${CMAKE_CURRENT_LIST_DIR}/systemd/einsummabled.service\")
set(EINSUMMABLE_UNIT_STAGED \"${CMAKE_BINARY_DIR}/deploy/einsummabled.service\")")
install(CODE [[
    file(READ "${EINSUMMABLE_UNIT}" unit)
    string(REPLACE "ExecStart=/usr/local/bin/einsummabled"
                   "ExecStart=${CMAKE_INSTALL_PREFIX}/bin/einsummabled" unit "${unit}")
    file(WRITE "${EINSUMMABLE_UNIT_STAGED}" "${unit}")
    file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" TYPE FILE
         PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
         FILES "${EINSUMMABLE_UNIT_STAGED}")
]])
install(FILES ${CMAKE_CURRENT_LIST_DIR}/systemd/einsummable.sysusers.conf
        DESTINATION lib/sysusers.d RENAME einsummable.conf)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/systemd/einsummabled.env
        DESTINATION share/doc/einsummable)
