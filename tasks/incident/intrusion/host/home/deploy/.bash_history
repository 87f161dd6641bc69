cd /srv/shop && ./deploy.sh 1.4.2
sudo systemctl status shop-web
