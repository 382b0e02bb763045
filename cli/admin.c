/* cli/admin.c: `sluice admin COMMAND`: asks a running server's master over
 * its admin socket and prints the answer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli/cli.h"

int sl_cli_admin(int argc, char **argv)
{
    const char *path = getenv("SLUICE_ADMIN_SOCKET"), *cmd = NULL;
    char def[64];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--socket") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "--port") && i + 1 < argc) {
            snprintf(def, sizeof def, "/tmp/sluice-%s.sock", argv[++i]);
            path = def;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: sluice admin [--socket PATH | --port PORT] effective-config|stats|health|pause|resume\n");
            return 0;
        } else if (!cmd && argv[i][0] != '-')
            cmd = argv[i];
        else {
            fprintf(stderr, "sluice admin: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!cmd) {
        fprintf(stderr, "usage: sluice admin [--socket PATH | --port PORT] effective-config|stats|health|pause|resume\n");
        return 2;
    }
    if (!path) {
        snprintf(def, sizeof def, "/tmp/sluice-8080.sock");
        path = def;
    }
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        fprintf(stderr, "sluice admin: cannot connect to %s: %s\n", path, strerror(errno));
        return 1;
    }
    dprintf(fd, "%s\n", cmd);
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        fwrite(buf, 1, (size_t)n, stdout);
    close(fd);
    return 0;
}
